package engine

// ggml's CPU backend has matrix kernels for weights stored interleaved
// ("repacked": 4 or 8 rows' blocks side by side), several times faster for
// Q4_0, Q4_K and IQ4_NL than the plain layout. llama.cpp puts such weights
// in the CPU_REPACK buffer type when it loads them; ollama's backend, which
// this engine runs on, loads every weight into the plain CPU buffer. After
// the load, repackWeights moves the matrix weights that have a repacked
// kernel into a CPU_REPACK buffer (the buffer's set_tensor repacks) and
// points the model's tensors there; the plain copy's pages are returned to
// the system, so memory does not double.
//
// The kernels run only when ggml was compiled with GGML_USE_CPU_REPACK
// (CGO_CPPFLAGS, set by the Makefile and scripts): without it the CPU
// backend lists no CPU_REPACK buffer type, and weights stay where they are.

/*
#cgo CPPFLAGS: -I${SRCDIR}/ggmlinc
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#endif

typedef ggml_backend_buffer_type_t * (*swarm_extra_bufts_fn)(ggml_backend_dev_t);

// swarm_repack_buft is the CPU backend's CPU_REPACK buffer type, or NULL
// where ggml was built without it.
static ggml_backend_buffer_type_t swarm_repack_buft(void) {
	ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
	if (dev == NULL) {
		return NULL;
	}
	ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
	swarm_extra_bufts_fn fn = (swarm_extra_bufts_fn) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
	if (fn == NULL) {
		return NULL;
	}
	for (ggml_backend_buffer_type_t * b = fn(dev); b != NULL && *b != NULL; b++) {
		if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) {
			return *b;
		}
	}
	return NULL;
}

// swarm_release gives the whole pages of [p, p+n) back to the system.
static void swarm_release(void * p, size_t n) {
#if defined(__unix__) || defined(__APPLE__)
	uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t) p + page - 1) & ~(page - 1);
	uintptr_t e = ((uintptr_t) p + n) & ~(page - 1);
	if (e > a) {
#if defined(MADV_NOHUGEPAGE)
		// The buffer asked for huge pages (swarm_hugepages): without this
		// khugepaged would fill the freed range back in, collapsing it
		// with a neighbour's pages into a whole huge page.
		madvise((void *) a, e - a, MADV_NOHUGEPAGE);
#endif
		madvise((void *) a, e - a, MADV_DONTNEED);
	}
#endif
}

// swarm_hugepages asks for 2 MiB pages over the whole 2 MiB blocks of
// [p, p+n): weights not yet written then come on huge pages, sparing the
// TLB as decode streams every weight once per token.
static void swarm_hugepages(void * p, size_t n) {
#if defined(MADV_HUGEPAGE)
	uintptr_t hp = 2u << 20;
	uintptr_t lo = ((uintptr_t) p + hp - 1) & ~(hp - 1);
	uintptr_t hi = ((uintptr_t) p + n) & ~(hp - 1);
	if (hi > lo) {
		madvise((void *) lo, hi - lo, MADV_HUGEPAGE);
	}
#endif
}

// swarm_tensor_hugepages asks for huge pages under the whole buffer that
// holds t (once per buffer is enough; again costs a system call).
static void swarm_tensor_hugepages(struct ggml_tensor * t) {
	if (t->buffer != NULL) {
		swarm_hugepages(ggml_backend_buffer_get_base(t->buffer), ggml_backend_buffer_get_size(t->buffer));
	}
}

// swarm_repack moves those of the n weights ws that ggml can repack into one
// new CPU_REPACK buffer, returned with its context in ctx and buf. It
// returns how many moved and their bytes, -1 where there is no CPU_REPACK
// buffer type, -2 where the buffer could not be allocated.
static int swarm_repack(struct ggml_tensor ** ws, int n, struct ggml_context ** ctx, ggml_backend_buffer_t * buf, size_t * bytes) {
	*ctx = NULL;
	*buf = NULL;
	*bytes = 0;
	ggml_backend_buffer_type_t buft = swarm_repack_buft();
	if (buft == NULL) {
		return -1;
	}
	struct ggml_init_params params = { ggml_tensor_overhead() * (size_t) n, NULL, true };
	struct ggml_context * c = ggml_init(params);
	if (c == NULL) {
		return -2;
	}
	struct ggml_tensor ** nt = malloc(sizeof(*nt) * (size_t) n);
	if (nt == NULL) {
		ggml_free(c);
		return -2;
	}
	for (int i = 0; i < n; i++) {
		nt[i] = ggml_dup_tensor(c, ws[i]);
		ggml_set_name(nt[i], ggml_get_name(ws[i]));
	}
	// The buffer's pages are untouched until a tensor is written: those
	// that turn out not repackable (no kernel for their shape) cost
	// address space only.
	ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(c, buft);
	if (b == NULL) {
		free(nt);
		ggml_free(c);
		return -2;
	}
	ggml_backend_buffer_set_usage(b, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
	swarm_hugepages(ggml_backend_buffer_get_base(b), ggml_backend_buffer_get_size(b));
	int moved = 0;
	for (int i = 0; i < n; i++) {
		if (nt[i]->extra == NULL) {
			continue; // no repacked kernel for this type and shape
		}
		void * old = ws[i]->data;
		size_t size = ggml_nbytes(ws[i]);
		ggml_backend_tensor_set(nt[i], old, 0, size);
		ws[i]->buffer = nt[i]->buffer;
		ws[i]->data = nt[i]->data;
		ws[i]->extra = nt[i]->extra;
		swarm_release(old, size);
		*bytes += size;
		moved++;
	}
	free(nt);
	*ctx = c;
	*buf = b;
	return moved;
}

static void swarm_repack_free(struct ggml_context * ctx, ggml_backend_buffer_t buf) {
	if (buf != NULL) {
		ggml_backend_buffer_free(buf);
	}
	if (ctx != NULL) {
		ggml_free(ctx);
	}
}

// swarm_on_cpu says whether t lives in the CPU backend's plain buffer
// (not on a GPU, whose memory the host must not touch).
static int swarm_on_cpu(const struct ggml_tensor * t) {
	ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
	return t->buffer != NULL && dev != NULL && ggml_backend_buffer_get_type(t->buffer) == ggml_backend_dev_buffer_type(dev);
}

static int swarm_repackable_type(enum ggml_type t) {
	return t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_IQ4_NL || t == GGML_TYPE_Q2_K;
}

static int swarm_tensor_dims(const struct ggml_tensor * t) { return ggml_n_dims(t); }
static enum ggml_type swarm_tensor_type(const struct ggml_tensor * t) { return t->type; }
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ollama/ollama/ml"
)

// repackSuffixes are the weights used only as the first operand of a
// matrix multiplication (the repacked layout serves nothing else): the
// attention and feed-forward projections, LFM2's short convolution's, and
// the output head. The token embedding (read by row) is never repacked.
var repackSuffixes = []string{
	".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_qkv.weight", ".attn_output.weight",
	".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight",
	".shortconv.in_proj.weight", ".shortconv.out_proj.weight",
	// latent attention's projections and shared experts (DeepSeek V3)
	".attn_q_a.weight", ".attn_q_b.weight", ".attn_kv_a_mqa.weight", ".attn_kv_b.weight",
	".ffn_gate_shexp.weight", ".ffn_up_shexp.weight", ".ffn_down_shexp.weight",
	// a mixture of experts' projections, one 3-D tensor each (the
	// repacked kernels serve their MUL_MAT_ID as well)
	".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_down_exps.weight",
	// Qwen3-Next's gated DeltaNet (attn_qkv above)
	".attn_gate.weight", ".ssm_ba.weight", ".ssm_out.weight",
	// Nemotron-H's Mamba-2 input projection (ssm_out above)
	".ssm_in.weight",
}

// repackable reports whether the weight named may be repacked.
func repackable(name string) bool {
	if name == "output.weight" {
		return true
	}
	if !strings.HasPrefix(name, "blk.") {
		return false
	}
	for _, s := range repackSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// repacked is the CPU_REPACK buffer holding a model's repacked weights.
type repacked struct {
	ctx     *C.struct_ggml_context
	buf     C.ggml_backend_buffer_t
	tensors int
	bytes   int64
}

// errNoRepack: ggml was compiled without GGML_USE_CPU_REPACK.
var errNoRepack = errors.New("ggml was built without GGML_USE_CPU_REPACK")

// repackWeights moves b's repackable weights among names into a CPU_REPACK
// buffer. It must run after the weights are loaded and before any graph
// uses them. A nil result with errNoRepack leaves the model as it was.
func repackWeights(b ml.Backend, names []string) (*repacked, error) {
	var ws []*C.struct_ggml_tensor
	for _, name := range names {
		if !repackable(name) {
			continue
		}
		t := b.Get(name)
		if t == nil {
			continue // a slice lacks the layers it does not hold
		}
		ct, err := cTensor(t)
		if err != nil {
			return nil, err
		}
		dims := 2
		if strings.HasSuffix(name, "_exps.weight") {
			dims = 3
		}
		if int(C.swarm_tensor_dims(ct)) != dims || C.swarm_repackable_type(C.swarm_tensor_type(ct)) == 0 || C.swarm_on_cpu(ct) == 0 {
			continue
		}
		ws = append(ws, ct)
	}
	if len(ws) == 0 {
		return &repacked{}, nil
	}
	arr := (**C.struct_ggml_tensor)(C.malloc(C.size_t(len(ws)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(arr))
	copy(unsafe.Slice(arr, len(ws)), ws)
	r := &repacked{}
	var bytes C.size_t
	n := C.swarm_repack(arr, C.int(len(ws)), &r.ctx, &r.buf, &bytes)
	switch {
	case n == -1:
		return nil, errNoRepack
	case n < 0:
		return nil, fmt.Errorf("%w: no memory for the repacked weights", ErrInternal)
	}
	r.tensors, r.bytes = int(n), int64(bytes)
	return r, nil
}

// free releases the repack buffer; the model's backend must be closed
// first or never use its weights again.
func (r *repacked) free() {
	if r == nil {
		return
	}
	C.swarm_repack_free(r.ctx, r.buf)
	r.ctx, r.buf = nil, nil
}

// cTensor is the ggml tensor behind one of ollama's: its unexported field
// t (ml/backend/ggml.Tensor), read by reflection. An ollama upgrade that
// renames it makes this fail, and TestRepackSameTokens with it.
func cTensor(t ml.Tensor) (*C.struct_ggml_tensor, error) {
	v := reflect.ValueOf(t)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		if f := v.Elem().FieldByName("t"); f.IsValid() && f.Kind() == reflect.Pointer && !f.IsNil() {
			return (*C.struct_ggml_tensor)(unsafe.Pointer(f.Pointer())), nil
		}
	}
	return nil, fmt.Errorf("%w: ollama's tensor type %T has no ggml tensor field t", ErrInternal, t)
}

// RepackAvailable reports whether the ggml in this binary has its repacked
// CPU kernels (compiled with GGML_USE_CPU_REPACK).
func RepackAvailable() bool { return C.swarm_repack_buft() != nil }

// ComputeArch names how this binary computes a quantized layer: the CPU
// architecture, with "+repack" where Q4 weights run on the repacked
// kernels. Peers announce it as their platform's arch. Two builds with one
// ComputeArch compute a layer alike; the repacked and plain kernels sum in
// another order, and over many layers their logits drift apart by up to a
// few percent (TestRepackSameTokens), as another CPU's do: a peer whose
// ComputeArch differs is compared within the cross-architecture bounds. (A
// peer of an earlier version, announcing the bare architecture, is such a
// peer, as it should be.)
func ComputeArch() string {
	if RepackAvailable() {
		return runtime.GOARCH + "+repack"
	}
	return runtime.GOARCH
}

// hugePages asks for 2 MiB pages under the weights named, before they are
// read in (ggml's CPU buffers are allocated untouched): decode reads every
// weight once per token, and with 4 KiB pages the TLB misses cost (on
// this project's 2-core machine, 0.6b decode at 2 threads: q4_k 28.8 to
// 30.6 tok/s, q8_0 19.9 to 20.7).
// Where the kernel does not do transparent huge pages it changes nothing.
func hugePages(b ml.Backend, names []string) {
	for _, name := range names {
		t := b.Get(name)
		if t == nil {
			continue
		}
		if ct, err := cTensor(t); err == nil && C.swarm_on_cpu(ct) != 0 {
			C.swarm_tensor_hugepages(ct)
		}
	}
}
