package config

import (
	"fmt"
	"reflect"
	"sync"

	"gopkg.in/yaml.v3"
)

// The file's schema is read from the struct tags of the types it decodes
// into, Config and the blocks under it (some of them the balancer's own
// option types):
//
//	yaml:"NAME"    the field's name in the file. A field without one is not
//	               in the file; an embedded struct without one has its
//	               fields inline (as Config has Pool's).
//	default:"V"    the value the field has when the file does not have it,
//	               written as in the file and decoded as the file is
//	               (160, 24h, 'ringlb:hold:', [502, 503, 504], or hash.key's
//	               [{cookie: session}, {header: X-User-ID}, {query: user},
//	               uri]); without one, the zero value. See applyDefaults.
//	decode:"HOW"   a string decoded with more than its kind: path (a file
//	               path, relative to the config file's directory), lower
//	               (lower-cased) or tls_version ("1.2" or "1.3" as
//	               tls.VersionTLS12 or tls.VersionTLS13).
//
// Everything else about decoding a field follows from its Go type (see
// decoder.value): the scalar kinds, lists, blocks (structs) and optional
// blocks (pointers to structs, nil when absent), and the few types with a
// decoder of their own (decoder.custom). Once an upstream's fields are
// decoded, its Addr is filled in from its URL (decoder.block).
//
// So a new field of a block is its field, with its name, default and a
// comment stating both and its bounds; its check in the block's
// validate_*.go (validate.go for the top level's and a pool's own
// fields); and its use. A pool's own scalars (retries,
// retry_statuses) are fields of balancer.PoolOptions, which Pool embeds
// and the balancer reads. Only upstream_tls is read in a shape of its own
// (its CA file is read into the roots the transports take), so a field of
// it also has its line in the command's conversion
// (cmd/ringlb/process/options.go).

// field is one field of a block as the file names it.
type field struct {
	key    string        // its name in the file
	index  []int         // its index for reflect.Value.FieldByIndex
	how    string        // its decode tag
	def    reflect.Value // its default tag decoded; invalid without one
	inline bool          // reached through an embedded struct without a yaml tag
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
	s.add(t, nil, false)
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
// index (nil: t is the block's), and which is embedded there when inline.
func (s *schema) add(t reflect.Type, index []int, inline bool) {
	for i := range t.NumField() {
		sf := t.Field(i)
		idx := append(index[:len(index):len(index)], i)
		key, tagged := sf.Tag.Lookup("yaml")
		switch {
		case !tagged && sf.Anonymous && sf.Type.Kind() == reflect.Struct:
			s.add(sf.Type, idx, true)
		case tagged && key != "-":
			f := field{key: key, index: idx, how: sf.Tag.Get("decode"), inline: inline}
			if def, ok := sf.Tag.Lookup("default"); ok {
				f.def = decodeDefault(t.Name()+"."+sf.Name, def, sf.Type, f.how)
			}
			s.fields = append(s.fields, f)
		}
	}
}

// decodeDefault decodes the default tag def of the field named name, of
// type t with the decode tag how, as the file's value would be decoded.
// A default that does not decode is a mistake in the code: it panics.
func decodeDefault(name, def string, t reflect.Type, how string) reflect.Value {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(def), &doc); err != nil || len(doc.Content) != 1 {
		panic(fmt.Sprintf("config: %s: default %q is not one YAML value: %v", name, def, err))
	}
	d := newDecoder("")
	v := reflect.New(t).Elem()
	d.value("default", doc.Content[0], v, how)
	if len(d.errs) > 0 {
		panic(fmt.Sprintf("config: %s: default %q: %v", name, def, d.errs))
	}
	return v
}

// setDefault sets v to the field's default, a copy of it for a list (so
// that no two configs share one).
func (f *field) setDefault(v reflect.Value) {
	if f.def.Kind() == reflect.Slice {
		v.Set(reflect.AppendSlice(reflect.MakeSlice(f.def.Type(), 0, f.def.Len()), f.def))
		return
	}
	v.Set(f.def)
}
