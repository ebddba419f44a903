package config

import (
	"fmt"
	"reflect"
	"sync"
)

// The file's schema is read from the struct tags of the types it decodes
// into, Config and the blocks under it (some of them the balancer's own
// option types):
//
//	yaml:"NAME"    the field's name in the file. A field without one is not
//	               in the file; an embedded struct without one has its
//	               fields inline (as Config has Pool's).
//	decode:"HOW"   a string decoded with more than its kind: path (a file
//	               path, relative to the config file's directory), lower
//	               (lower-cased) or tls_version ("1.2" or "1.3" as
//	               tls.VersionTLS12 or tls.VersionTLS13).
//
// Everything else about decoding a field follows from its Go type (see
// decoder.value): the scalar kinds, lists, blocks (structs) and optional
// blocks (pointers to structs, nil when absent), and the few types with a
// decoder of their own (decoder.custom).

// field is one field of a block as the file names it.
type field struct {
	key   string // its name in the file
	index []int  // its index for reflect.Value.FieldByIndex
	how   string // its decode tag
}

// schema is the fields of a block, in the order of its type.
type schema struct {
	fields []field
	byKey  map[string]*field
}

// schemas caches schemaOf's answers by type.
var schemas sync.Map // reflect.Type → *schema

// schemaOf returns the schema of struct type t.
func schemaOf(t reflect.Type) *schema {
	if s, ok := schemas.Load(t); ok {
		return s.(*schema)
	}
	s := &schema{byKey: map[string]*field{}}
	s.add(t, nil)
	for i := range s.fields {
		f := &s.fields[i]
		if _, dup := s.byKey[f.key]; dup {
			panic(fmt.Sprintf("config: %s: two fields named %s", t, f.key))
		}
		s.byKey[f.key] = f
	}
	got, _ := schemas.LoadOrStore(t, s)
	return got.(*schema)
}

// add adds the fields of struct type t, whose index in the block's type is
// index (nil: t is the block's).
func (s *schema) add(t reflect.Type, index []int) {
	for i := range t.NumField() {
		sf := t.Field(i)
		idx := append(index[:len(index):len(index)], i)
		key, tagged := sf.Tag.Lookup("yaml")
		switch {
		case !tagged && sf.Anonymous && sf.Type.Kind() == reflect.Struct:
			s.add(sf.Type, idx)
		case tagged && key != "-":
			s.fields = append(s.fields, field{key: key, index: idx, how: sf.Tag.Get("decode")})
		}
	}
}
