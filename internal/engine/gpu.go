package engine

// GPU backends. ollama's ggml backend loads ggml's GPU backends (Vulkan,
// CUDA: libggml-vulkan.so, libggml-cuda.so, built by `make build-vulkan`
// or from the same module's sources with CUDA) at its first use, from the
// folders of OLLAMA_LIBRARY_PATH, which InitBackends sets before that: to
// the folder it is given, else lib/ollama beside the executable's folder
// (bin/swarmd -> lib/ollama). It reports what was found, and why a library
// found did not load; Load puts a model's layers on the device with the
// most memory left (Options.GPULayers, gpu_plan.go).

/*
#cgo CPPFLAGS: -I${SRCDIR}/ggmlinc
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include "ggml.h"
#include "ggml-backend.h"

// swarm_dlerror tries to open the library at path as ggml would and says
// why it cannot (NULL: it opens).
static char * swarm_dlerror(const char * path) {
	void * h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h != NULL) {
		dlclose(h);
		return NULL;
	}
	const char * e = dlerror();
	return e == NULL ? NULL : strdup(e);
}

static void swarm_sync(ggml_backend_t b) { ggml_backend_synchronize(b); }

// sink is ollama's log callback (ml/backend/ggml/ggml/src), which writes
// ggml's messages at the default logger's level.
extern void sink(int level, char * text, void * user_data);
static void swarm_sink(enum ggml_log_level level, const char * text, void * user_data) {
	sink((int) level, (char *) text, user_data);
}

typedef void (*swarm_log_set_fn)(ggml_log_callback, void *);

// swarm_route_logs gives the ggml of the GPU backends (their own
// libggml-base.so, loaded beside them) ollama's log callback, as the
// ggml compiled into this binary has: without it, its debug messages (a
// line per memory query) go to stderr whatever the log level. It returns
// 0 where that library is not loaded.
static int swarm_route_logs(void) {
	void * h = dlopen("libggml-base.so.0", RTLD_NOW | RTLD_NOLOAD);
	if (h == NULL) {
		return 0;
	}
	swarm_log_set_fn set = (swarm_log_set_fn) dlsym(h, "ggml_log_set");
	if (set != NULL) {
		set(swarm_sink, NULL);
	}
	dlclose(h);
	return set != NULL;
}

static int swarm_is_gpu(ggml_backend_dev_t d) {
	enum ggml_backend_dev_type t = ggml_backend_dev_type(d);
	return t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU;
}
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/ollama/ollama/ml"
	ggmlsrc "github.com/ollama/ollama/ml/backend/ggml/ggml/src"
)

// LibraryPathEnv is the variable ollama's ggml reads the folders of GPU
// backends from (filepath.SplitList), each of which must end in
// lib/ollama; InitBackends sets it (the engine reads no environment).
const LibraryPathEnv = "OLLAMA_LIBRARY_PATH"

// Device is a GPU a loaded backend found.
type Device struct {
	// Backend is ggml's name for the backend: "Vulkan", "CUDA".
	Backend string `json:"backend"`
	// Name is ggml's name for the device ("Vulkan0"); ID its backend's
	// identifier.
	Name string `json:"name"`
	ID   string `json:"id"`
	// Description is the device as its driver names it ("NVIDIA H200",
	// "llvmpipe (LLVM 15.0.6, 256 bits)").
	Description string `json:"description"`
	// Total and Free are its memory, in bytes, as the driver reports it
	// (Free may be Total where the driver reports no budget).
	Total uint64 `json:"total_bytes"`
	Free  uint64 `json:"free_bytes"`
	// Integrated: it shares the system's memory (an iGPU).
	Integrated bool `json:"integrated,omitempty"`
	// library is ggml's props.library, which with ID names the device
	// to ollama's backend (ml.DeviceID).
	library string
}

func (d Device) String() string {
	return fmt.Sprintf("%s %s (%s, %.1f GiB)", d.Backend, d.Name, d.Description, float64(d.Total)/(1<<30))
}

// Backends is what InitBackends found.
type Backends struct {
	// Dirs are the folders GPU backends were looked for in.
	Dirs []string `json:"dirs"`
	// Loaded are the GPU backends ggml registered ("Vulkan").
	Loaded []string `json:"loaded,omitempty"`
	// Devices are their devices.
	Devices []Device `json:"devices,omitempty"`
	// Warnings say why a library found did not give a device: it did not
	// load (the loader's own words), or its backend found no device.
	Warnings []string `json:"warnings,omitempty"`
}

var backends struct {
	mu   sync.Mutex
	done bool // ggml has loaded its backends (through loadBackends)
	r    Backends
}

// InitBackends loads the GPU backends in dir once for the process ("":
// lib/ollama beside the executable's folder) and reports them. It must
// come before the first Load to choose the folder (Load loads from the
// default otherwise); afterwards, and on later calls, it reports what the
// first load found. dir must end in lib/ollama (ollama's ggml loads from
// no other).
func InitBackends(dir string) (Backends, error) {
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return Backends{}, fmt.Errorf("%w: GPU backend folder %q: %v", ErrBadInput, dir, err)
		}
		if !strings.HasSuffix(filepath.ToSlash(abs), "lib/ollama") {
			return Backends{}, fmt.Errorf("%w: GPU backend folder %q must end in lib/ollama (ggml loads backends from no other)", ErrBadInput, dir)
		}
		dir = abs
	}
	return loadBackends(dir), nil
}

// loadBackends has ggml load its backends from dir ("": the default),
// once, and notes what came of it. Load calls it before ollama's backend
// would load them itself.
func loadBackends(dir string) Backends {
	backends.mu.Lock()
	defer backends.mu.Unlock()
	if !backends.done {
		backends.done = true
		if dir == "" {
			dir = defaultBackendDir()
		}
		os.Setenv(LibraryPathEnv, dir)
		ggmlsrc.OnceLoad()
		C.swarm_route_logs()
		r := &backends.r
		r.Dirs = []string{dir}
		for i := range C.ggml_backend_reg_count() {
			name := C.GoString(C.ggml_backend_reg_name(C.ggml_backend_reg_get(i)))
			if name != "CPU" {
				r.Loaded = append(r.Loaded, name)
			}
		}
		r.Devices = devices()
		r.Warnings = backendWarnings(r.Dirs, r.Loaded, r.Devices)
	}
	return backends.r
}

// defaultBackendDir is lib/ollama beside the executable's folder, as
// ollama's ggml has it.
func defaultBackendDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "lib/ollama"
	}
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), "lib", "ollama")
}

// backendWarnings names each GPU backend library in dirs that gave no
// device, and why.
func backendWarnings(dirs, loaded []string, devs []Device) []string {
	var out []string
	for _, dir := range dirs {
		libs, _ := filepath.Glob(filepath.Join(dir, "libggml-*.so"))
		for _, lib := range libs {
			name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(lib), "libggml-"), ".so")
			if name == "base" || strings.HasPrefix(name, "cpu") {
				continue
			}
			i := slices.IndexFunc(loaded, func(l string) bool { return strings.EqualFold(l, name) })
			if i < 0 {
				out = append(out, fmt.Sprintf("%s did not load: %s; running on the CPU", lib, dlError(lib)))
				continue
			}
			if !slices.ContainsFunc(devs, func(d Device) bool { return d.Backend == loaded[i] }) {
				why := "its driver lists no GPU"
				if loaded[i] == "Vulkan" {
					why += " (ggml skips software renderers such as llvmpipe unless GGML_VK_VISIBLE_DEVICES names them)"
				}
				out = append(out, fmt.Sprintf("the %s backend found no device: %s; running on the CPU", loaded[i], why))
			}
		}
	}
	return out
}

// dlError is why the library at path does not load, in the loader's words.
func dlError(path string) string {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	e := C.swarm_dlerror(cp)
	if e == nil {
		return "it loads, but ggml did not register it (built for another ggml, or its CPU check failed)"
	}
	defer C.free(unsafe.Pointer(e))
	return C.GoString(e)
}

// devices lists the GPUs ggml's registered backends found, with their
// memory now.
func devices() []Device {
	var out []Device
	for i := range C.ggml_backend_dev_count() {
		d := C.ggml_backend_dev_get(i)
		if C.swarm_is_gpu(d) == 0 {
			continue
		}
		var p C.struct_ggml_backend_dev_props
		C.ggml_backend_dev_get_props(d, &p)
		var free, total C.size_t
		C.ggml_backend_dev_memory(d, &free, &total)
		dev := Device{
			Backend:     C.GoString(C.ggml_backend_reg_name(C.ggml_backend_dev_backend_reg(d))),
			Name:        C.GoString(p.name),
			Description: C.GoString(p.description),
			Total:       uint64(total),
			Free:        uint64(free),
			Integrated:  C.ggml_backend_dev_type(d) == C.GGML_BACKEND_DEVICE_TYPE_IGPU,
		}
		if p.id != nil {
			dev.ID = C.GoString(p.id)
		}
		if p.library != nil {
			dev.library = C.GoString(p.library)
		}
		out = append(out, dev)
	}
	return out
}

// Devices lists the GPUs of the loaded backends with their memory now
// (loading the backends first, as InitBackends("") does).
func Devices() []Device {
	loadBackends("")
	return devices()
}

// syncBackends waits for every backend b schedules on to finish its work.
func syncBackends(b ml.Backend) {
	for _, e := range schedBackends(b) {
		C.swarm_sync(C.ggml_backend_t(e))
	}
}
