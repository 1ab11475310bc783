package llmgov

/*
#include "llmgov.h"
*/
import "C"

import "unsafe"

// Encoding is a BPE encoding used by OpenAI models.
type Encoding uint32

// The encodings.
const (
	O200k  Encoding = 0 // o200k_base: GPT-4o, GPT-4.1, GPT-5, the o-series
	Cl100k Encoding = 1 // cl100k_base: GPT-4 (before 4o), GPT-3.5 Turbo
)

// textPtr points C at a Go string's bytes for the duration of a call.
func textPtr(s string) *C.char {
	if len(s) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s)))
}

// CountTokens is the exact token count of text in an encoding. Safe on any
// text; the first count in an encoding builds its tables (0.1 to 0.3 s).
func CountTokens(encoding Encoding, text string) (uint64, error) {
	var n C.uint64_t
	err := call(func() C.llmgov_result {
		return C.llmgov_tokens_count(C.uint32_t(encoding), textPtr(text), C.size_t(len(text)), &n)
	})
	return uint64(n), err
}

// CountTokensForModel counts text in the encoding of an OpenAI model
// ("gpt-4o", "openai/gpt-4-0613"; unknown models count as o200k).
func CountTokensForModel(model, text string) (uint64, error) {
	cmodel, err := cString("model", model)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cmodel))
	var n C.uint64_t
	err = call(func() C.llmgov_result {
		return C.llmgov_tokens_count_for_model(cmodel, textPtr(text), C.size_t(len(text)), &n)
	})
	return uint64(n), err
}

// EstimateTokens is a fast o200k estimate of the tokens in text (no BPE).
func EstimateTokens(text string) (uint64, error) {
	var n C.uint64_t
	err := call(func() C.llmgov_result {
		return C.llmgov_tokens_estimate(textPtr(text), C.size_t(len(text)), &n)
	})
	return uint64(n), err
}
