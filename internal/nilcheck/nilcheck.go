// Package nilcheck tells whether an interface value holds nothing usable: a
// nil interface, or a typed nil pointer, map, slice, func or channel inside
// one, which a plain == nil misses.
package nilcheck

import "reflect"

// Is reports whether v is nil or holds a nil pointer, map, slice, func,
// channel or interface.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
