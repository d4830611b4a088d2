package engine

import (
	"fmt"
	"strings"
)

// heldLayers refuses a file of arch that lacks tensors of the layers it
// holds (every layer from the first it has a tensor of to the last), or the
// embedding or head its ends need, naming them (at most 8): for families
// whose ollama model has no Validate, and whose forward pass would
// dereference a missing tensor. has says whether layer i has any tensor,
// missing names what layer i lacks; embed, outNorm and out say whether the
// ends' tensors are there.
func heldLayers(arch string, n int, has func(i int) bool, missing func(i int) []string, embed, outNorm, out bool) error {
	lo, hi := -1, -1
	for i := range n {
		if has(i) {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	if lo < 0 {
		return fmt.Errorf("%w: %s file with no layer", ErrMissingLayers, arch)
	}
	var lack []string
	if lo == 0 && !embed {
		lack = append(lack, "token_embd.weight")
	}
	for i := lo; i <= hi; i++ {
		lack = append(lack, missing(i)...)
	}
	if hi == n-1 {
		if !outNorm {
			lack = append(lack, "output_norm.weight")
		}
		if !out {
			lack = append(lack, "output.weight")
		}
	}
	if len(lack) == 0 {
		return nil
	}
	if len(lack) > 8 {
		lack = append(lack[:8], fmt.Sprintf("and %d more", len(lack)-8))
	}
	return fmt.Errorf("%w: %s layers [%d,%d) lack %s", ErrMissingLayers, arch, lo, hi+1, strings.Join(lack, ", "))
}
