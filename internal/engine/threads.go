package engine

// ggml's CPU backend, given no thread pool, makes one for every graph it
// computes: it starts Threads-1 threads, runs the graph and joins them, once
// per decoded token. At 16 threads that start-up, and workers that begin
// cold on whatever core is free, cost more than the extra threads give
// (decode was flat from 8 to 16 threads). llama.cpp keeps its workers
// between graphs (OpenMP's pool, or a ggml thread pool); so does this
// engine: one pool for the process, since ollama's backend shares one CPU
// backend object between every loaded model, attached before each graph
// runs, together with that model's own thread count.

/*
#cgo CPPFLAGS: -I${SRCDIR}/ggmlinc
#include <stddef.h>
#include "ggml.h"
#include "ggml-backend.h"

typedef struct ggml_threadpool * (*swarm_tp_new_fn)(struct ggml_threadpool_params *);
typedef void (*swarm_tp_free_fn)(struct ggml_threadpool *);
typedef void (*swarm_set_tp_fn)(ggml_backend_t, struct ggml_threadpool *);
typedef void (*swarm_set_n_fn)(ggml_backend_t, int);

static void * swarm_cpu_proc(const char * name) {
	ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
	if (dev == NULL) {
		return NULL;
	}
	return ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), name);
}

// The CPU backend's pool functions, looked up once (under computeMu).
static int swarm_looked;
static swarm_tp_new_fn swarm_tp_new;
static swarm_tp_free_fn swarm_tp_free;
static swarm_set_tp_fn swarm_set_tp;
static swarm_set_n_fn swarm_set_n;

static void swarm_lookup(void) {
	if (swarm_looked) {
		return;
	}
	swarm_looked = 1;
	swarm_tp_new = (swarm_tp_new_fn) swarm_cpu_proc("ggml_threadpool_new");
	swarm_tp_free = (swarm_tp_free_fn) swarm_cpu_proc("ggml_threadpool_free");
	swarm_set_tp = (swarm_set_tp_fn) swarm_cpu_proc("ggml_backend_cpu_set_threadpool");
	swarm_set_n = (swarm_set_n_fn) swarm_cpu_proc("ggml_backend_set_n_threads");
}

static int swarm_is_cpu(ggml_backend_t b) {
	ggml_backend_dev_t dev = ggml_backend_get_device(b);
	return dev != NULL && ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU;
}

// swarm_pool_new starts a pool of n workers (the caller's thread is the
// first), or returns NULL where the CPU backend exports no pool functions.
static struct ggml_threadpool * swarm_pool_new(int n) {
	swarm_lookup();
	if (swarm_tp_new == NULL) {
		return NULL;
	}
	struct ggml_threadpool_params p = ggml_threadpool_params_default(n);
	// After a graph the workers spin for new work before they sleep:
	// 1024*128*poll pause instructions, about 0.3 s at ggml's default of
	// 50, which would burn n-1 cores while a pipeline stage waits on the
	// network (or a phone idles). At 1 they spin a few milliseconds: long
	// enough to catch the next decode step's graph, built within one.
	p.poll = 1;
	return swarm_tp_new(&p);
}

static void swarm_pool_free(struct ggml_threadpool * tp) {
	swarm_lookup();
	if (swarm_tp_free != NULL && tp != NULL) {
		swarm_tp_free(tp);
	}
}

// swarm_use_pool makes b, a CPU backend, run its graphs on n workers of tp
// (tp may be NULL: a pool per graph, ggml's default). It returns 0 where
// the backend exports no setter.
static int swarm_use_pool(ggml_backend_t b, struct ggml_threadpool * tp, int n) {
	swarm_lookup();
	if (swarm_set_tp == NULL || swarm_set_n == NULL) {
		return 0;
	}
	swarm_set_tp(b, tp);
	swarm_set_n(b, n);
	return 1;
}
*/
import "C"

import (
	"reflect"
	"unsafe"

	"github.com/ollama/ollama/ml"
)

// pool is the process's ggml worker pool; it is used and replaced under
// computeMu only.
var pool struct {
	tp *C.struct_ggml_threadpool
	n  int // workers in tp
}

// useThreads makes the CPU backends cpu (cpuBackends') run the next graph
// on n threads from the process's pool, growing the pool when n is more
// than it has. noPool runs the graph on a pool made for it alone (ggml's
// default, for comparisons). It must be called under computeMu.
func useThreads(cpu []unsafe.Pointer, n int, noPool bool) {
	var tp *C.struct_ggml_threadpool
	if !noPool {
		if pool.n < n {
			grown := C.swarm_pool_new(C.int(n))
			if grown != nil {
				old := pool.tp
				pool.tp, pool.n = grown, n
				defer C.swarm_pool_free(old) // after the backends let go of it
			}
		}
		if pool.n >= n {
			tp = pool.tp
		}
	}
	for _, be := range cpu {
		C.swarm_use_pool(C.ggml_backend_t(be), tp, C.int(n))
	}
}

// cpuBackends are the CPU backends among the scheduler's backends of
// ollama's ggml backend (schedBackends). Load finds them once per model.
func cpuBackends(b ml.Backend) []unsafe.Pointer {
	var out []unsafe.Pointer
	for _, e := range schedBackends(b) {
		if C.swarm_is_cpu(C.ggml_backend_t(e)) != 0 {
			out = append(out, e)
		}
	}
	return out
}

// schedBackends are the backends ollama's ggml backend schedules its
// graphs on (ml/backend/ggml.Backend's schedBackends, read by reflection,
// as tensorOf reads a tensor: an ollama upgrade that renames the field
// leaves ggml's default of a pool per graph, and TestThreadPoolKept fails).
func schedBackends(b ml.Backend) []unsafe.Pointer {
	v := reflect.ValueOf(b)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	f := v.Elem().FieldByName("schedBackends")
	if !f.IsValid() || f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Pointer {
		return nil
	}
	out := make([]unsafe.Pointer, 0, f.Len())
	for i := range f.Len() {
		if e := f.Index(i); !e.IsNil() {
			out = append(out, unsafe.Pointer(e.Pointer()))
		}
	}
	return out
}
