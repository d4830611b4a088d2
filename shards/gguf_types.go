package shards

import "fmt"

// GGMLType is a ggml tensor type id as stored in GGUF tensor infos.
type GGMLType uint32

type typeTraits struct {
	name      string
	blockSize uint64 // elements per block
	typeSize  uint64 // bytes per block
}

// ggmlTypes holds the block layout of every ggml type GGUF files carry.
var ggmlTypes = map[GGMLType]typeTraits{
	0:  {"F32", 1, 4},
	1:  {"F16", 1, 2},
	2:  {"Q4_0", 32, 18},
	3:  {"Q4_1", 32, 20},
	6:  {"Q5_0", 32, 22},
	7:  {"Q5_1", 32, 24},
	8:  {"Q8_0", 32, 34},
	9:  {"Q8_1", 32, 36},
	10: {"Q2_K", 256, 84},
	11: {"Q3_K", 256, 110},
	12: {"Q4_K", 256, 144},
	13: {"Q5_K", 256, 176},
	14: {"Q6_K", 256, 210},
	15: {"Q8_K", 256, 292},
	16: {"IQ2_XXS", 256, 66},
	17: {"IQ2_XS", 256, 74},
	18: {"IQ3_XXS", 256, 98},
	19: {"IQ1_S", 256, 50},
	20: {"IQ4_NL", 32, 18},
	21: {"IQ3_S", 256, 110},
	22: {"IQ2_S", 256, 82},
	23: {"IQ4_XS", 256, 136},
	24: {"I8", 1, 1},
	25: {"I16", 1, 2},
	26: {"I32", 1, 4},
	27: {"I64", 1, 8},
	28: {"F64", 1, 8},
	29: {"IQ1_M", 256, 56},
	30: {"BF16", 1, 2},
	34: {"TQ1_0", 256, 54},
	35: {"TQ2_0", 256, 66},
	39: {"MXFP4", 32, 17},
}

// Common ggml types.
const (
	GGMLF32  GGMLType = 0
	GGMLF16  GGMLType = 1
	GGMLQ8_0 GGMLType = 8
	GGMLQ4_K GGMLType = 12
	GGMLQ6_K GGMLType = 14
	GGMLBF16 GGMLType = 30
)

func (t GGMLType) String() string {
	if tr, ok := ggmlTypes[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("type%d", uint32(t))
}

// tensorBytes returns the byte size of a tensor of type t and shape dims.
func tensorBytes(t GGMLType, dims []uint64) (uint64, error) {
	tr, ok := ggmlTypes[t]
	if !ok {
		return 0, fmt.Errorf("unknown ggml type %d", uint32(t))
	}
	n := uint64(1)
	for _, d := range dims {
		if d == 0 {
			return 0, nil
		}
		if n > (1<<62)/d {
			return 0, fmt.Errorf("tensor shape %v overflows", dims)
		}
		n *= d
	}
	if len(dims) > 0 && dims[0]%tr.blockSize != 0 {
		return 0, fmt.Errorf("row of %d elements is not a multiple of the %s block size %d", dims[0], tr.name, tr.blockSize)
	}
	return n / tr.blockSize * tr.typeSize, nil
}

// fileTypeNames maps general.file_type (llama_ftype) to its usual name.
var fileTypeNames = map[uint32]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
	37: "TQ2_0", 38: "MXFP4",
}
