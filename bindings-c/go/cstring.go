package llmgov

/*
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// cString copies s into C memory for an argument that C reads up to its
// first NUL; free it with C.free. Every such string goes through here: a
// NUL inside s would silently cut it short there (a preset name, a path,
// a config all read as their prefix), so it is refused instead, as an
// *Error with code ErrInvalidArg naming field and showing the NUL as \x00.
// (Text the C library takes as pointer and length, such as the text
// counted by CountTokens, is passed without a copy and may hold NULs.)
func cString(field, s string) (*C.char, error) {
	if at := strings.IndexByte(s, 0); at >= 0 {
		return nil, invalidArg(field, aroundNUL(s, at),
			fmt.Sprintf("contains a NUL byte (at byte %d); the C library would read only the text before it", at))
	}
	return C.CString(s), nil
}

// cStrings is cString for each of items, whose fields are
// field[0], field[1], …: a C array of them, NULL-terminated (so it has a
// first element even when items is empty), and the function freeing it.
// On error nothing is left to free.
func cStrings(field string, items []string) ([]*C.char, func(), error) {
	// Go memory holding C pointers may be passed to C.
	array := make([]*C.char, len(items)+1)
	free := func() {
		for _, p := range array {
			C.free(unsafe.Pointer(p))
		}
	}
	for i, item := range items {
		p, err := cString(fmt.Sprintf("%s[%d]", field, i), item)
		if err != nil {
			free()
			return nil, nil, err
		}
		array[i] = p
	}
	return array, free, nil
}

// aroundNUL is s with every NUL written \x00, cut to about 100 bytes each
// side of the first (at), so a long config still shows where it is.
func aroundNUL(s string, at int) string {
	const side = 100
	start, end := max(at-side, 0), min(at+side, len(s))
	for start > 0 && !utf8.RuneStart(s[start]) {
		start--
	}
	for end < len(s) && !utf8.RuneStart(s[end]) {
		end++
	}
	shown := strings.ReplaceAll(s[start:end], "\x00", `\x00`)
	if start > 0 {
		shown = "…" + shown
	}
	if end < len(s) {
		shown += "…"
	}
	return shown
}
