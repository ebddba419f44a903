package config

import (
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ringlb/ringlb/balancer/key"
)

// fieldPaths lists the YAML paths of every field of t: "hold.share.redis",
// "upstreams[].name". Embedded structs without a name are inline;
// values that are not blocks of fields (durations, URLs, key sources,
// status ranges) are leaves.
func fieldPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	leaf := map[reflect.Type]bool{
		reflect.TypeFor[time.Duration](): true, reflect.TypeFor[url.URL](): true, reflect.TypeFor[netip.Prefix](): true,
		reflect.TypeFor[key.Source](): true, reflect.TypeFor[StatusRange](): true,
	}
	switch {
	case leaf[t]:
		return []string{prefix}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && !leaf[t.Elem()]:
		return fieldPaths(t.Elem(), prefix+"[]")
	case t.Kind() != reflect.Struct:
		return []string{prefix}
	}
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case f.Anonymous && name == "":
			out = append(out, fieldPaths(f.Type, prefix)...)
		case name == "" || name == "-":
		default:
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			out = append(out, fieldPaths(f.Type, p)...)
		}
	}
	return out
}

// nodePaths adds the paths of the mapping keys under n to into.
func nodePaths(n *yaml.Node, prefix string, into map[string]bool) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			nodePaths(c, prefix, into)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			nodePaths(c, prefix+"[]", into)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if prefix != "" {
				p = prefix + "." + p
			}
			into[p] = true
			nodePaths(n.Content[i+1], p, into)
		}
	}
}

// commentedField matches a field written as a comment: "# cert_file: ...".
var commentedField = regexp.MustCompile(`(?m)^\s*#\s*(?:- )?([a-z_]+):`)

// TestRootConfigWritesOutEveryField: config.yaml, which says it writes out
// every field, has each field of the config's schema, as a key or (for a
// block whose default is to be absent) as a comment. Only pools, routes
// and discovery, which change the file's shape, are left to the docs.
func TestRootConfigWritesOutEveryField(t *testing.T) {
	data, err := os.ReadFile(rootConfig)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	nodePaths(&doc, "", present)
	var commented []string
	for _, m := range commentedField.FindAllStringSubmatch(string(data), -1) {
		commented = append(commented, m[1])
	}
	paths := fieldPaths(reflect.TypeFor[Config](), "")
	if len(paths) < 80 {
		t.Fatalf("only %d fields found: %q", len(paths), paths)
	}
	for _, p := range paths {
		top, _, _ := strings.Cut(p, ".")
		top = strings.TrimSuffix(top, "[]")
		if top == "pools" || top == "routes" || top == "discovery" {
			continue
		}
		leaf := p[strings.LastIndexAny(p, ".]")+1:]
		if !present[p] && !slices.Contains(commented, leaf) {
			t.Errorf("config.yaml does not write out %s", p)
		}
	}
}
