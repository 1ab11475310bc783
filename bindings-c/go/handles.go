package llmgov

import "fmt"

// errNil is the error of a nil handle: a nil argument (a nil *Profile), a
// method called on a nil pointer, or on a zero value that no constructor
// made. Code ErrNullArgument, as the C library's for NULL, naming what.
func errNil(what, makers string) error {
	return &Error{
		Code:     ErrNullArgument,
		CodeName: ErrNullArgument.Name(),
		Message:  fmt.Sprintf("argument `%s` must not be nil; make one with %s", what, makers),
		Field:    what,
	}
}

// errClosed is the error of a handle used after its Close: code
// ErrInvalidArg naming what, and errors.Is(err, ErrClosed) holds.
func errClosed(what string) error {
	return &Error{
		Code:     ErrInvalidArg,
		CodeName: ErrInvalidArg.Name(),
		Message:  fmt.Sprintf("argument `%s` = `closed`: it was closed, and cannot be used after Close", what),
		Field:    what,
		Value:    "closed",
		closed:   true,
	}
}

// Who makes each handle, for errNil.
const (
	governorMakers = "FromTOML, FromJSON or FromPreset"
	permitMakers   = "Governor.TryAcquire or Governor.Acquire"
	profileMakers  = "Governor.Profile"
	clockMakers    = "NewManualClock"
	ctxMakers      = "context.Background or context.WithTimeout"
)
