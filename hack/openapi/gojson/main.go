// Command gojson exports how Go's encoding/json lays out the Kubernetes types that the
// agent-sandbox hashes cover, and computes reference hashes with the real Go types.
//
//	go run . structs        > ../../../src/agentsandbox/api/gostructs.json
//	go run . hash < templates.json   # one "<fnv1a32> <json>" line per pod template
//	go run . blueprint-hash < blueprints.json   # the same per SandboxBlueprint (template spec)
//
// The Python package reproduces Go's serialisation from the exported table (field order,
// omitempty/omitzero, pointer/struct/slice/map shape, types with their own JSON form), so that
// pod-template hashes match the ones the Go controllers write. `hash` is the oracle for tests.
package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// PodMetadata and PodTemplate mirror the agent-sandbox API types (spec first, then metadata).
type PodMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type PodTemplate struct {
	Spec     corev1.PodSpec `json:"spec"`
	Metadata PodMetadata    `json:"metadata,omitempty"`
}

// EmbeddedObjectMetadata, PersistentVolumeClaimTemplate and SandboxBlueprint mirror upstream's
// api/v1beta1 types (#995 inlined SandboxBlueprint; #1102 hashes json.Marshal of it into the
// agents.x-k8s.io/sandbox-template-hash label): same field order and json tags.
type EmbeddedObjectMetadata struct {
	Name        string            `json:"name,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type PersistentVolumeClaimTemplate struct {
	EmbeddedObjectMetadata `json:"metadata"`
	Spec                   corev1.PersistentVolumeClaimSpec `json:"spec"`
}

type SandboxBlueprint struct {
	PodTemplate          PodTemplate                     `json:"podTemplate"`
	VolumeClaimTemplates []PersistentVolumeClaimTemplate `json:"volumeClaimTemplates,omitempty"`
	Service              *bool                           `json:"service,omitempty"`
}

var special = map[string]string{
	"k8s.io/apimachinery/pkg/api/resource.Quantity":   "quantity",
	"k8s.io/apimachinery/pkg/util/intstr.IntOrString": "intorstring",
	"k8s.io/apimachinery/pkg/apis/meta/v1.Time":       "time",
	"k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime":  "microtime",
	"k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1":   "rawjson",
}

var marshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()

type field struct {
	Name  string `json:"name"`
	Flags string `json:"flags,omitempty"`
	Type  string `json:"type"`
}

func typeName(t reflect.Type) string {
	pkg := t.PkgPath()
	if pkg == "main" {
		pkg = "agentsandbox"
	}
	return pkg + "." + t.Name()
}

type exporter struct {
	structs map[string][]field
}

func (e *exporter) expr(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		return "*" + e.expr(t.Elem())
	}
	if s, ok := special[typeName(t)]; ok {
		return s
	}
	if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) {
		panic("type with its own JSON form not in the special table: " + typeName(t))
	}
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		return "[]" + e.expr(t.Elem())
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic("map with non-string keys: " + t.String())
		}
		return "map[string]" + e.expr(t.Elem())
	case reflect.Struct:
		name := typeName(t)
		if _, done := e.structs[name]; !done {
			e.structs[name] = nil // break cycles
			e.structs[name] = e.fields(t)
		}
		return "@" + name
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int"
	case reflect.Float32, reflect.Float64:
		return "float"
	case reflect.Interface:
		return "any"
	}
	panic("unsupported kind " + t.Kind().String() + " in " + t.String())
}

// fields lists the JSON fields of a struct in encoding order, promoting the fields of embedded
// structs without a JSON name the way encoding/json does.
func (e *exporter) fields(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				panic("embedded pointer in " + t.String())
			}
			if ft.Kind() == reflect.Struct {
				if _, ok := special[typeName(ft)]; !ok {
					out = append(out, e.fields(ft)...)
					continue
				}
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		var flags []string
		for _, o := range strings.Split(opts, ",") {
			if o == "omitempty" || o == "omitzero" {
				flags = append(flags, o)
			}
		}
		out = append(out, field{Name: name, Flags: strings.Join(flags, ","), Type: e.expr(f.Type)})
	}
	return out
}

func apiVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/api" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func structs() {
	e := &exporter{structs: map[string][]field{}}
	roots := map[string]string{
		"podTemplate":               e.expr(reflect.TypeOf(PodTemplate{})),
		"persistentVolumeClaimSpec": e.expr(reflect.TypeOf(corev1.PersistentVolumeClaimSpec{})),
		"sandboxBlueprint":          e.expr(reflect.TypeOf(SandboxBlueprint{})),
	}
	names := make([]string, 0, len(e.structs))
	for n := range e.structs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]any{
		"generator":  "hack/openapi/gojson (go run . structs)",
		"k8s.io/api": apiVersion(),
		"roots":      roots,
		"structs":    e.structs,
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(append(b, '\n'))
}

// hash prints "<fnv1a32> <json>" for each input object decoded into a fresh value of newT().
func hash[T any](newT func() *T) {
	var in []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	for _, raw := range in {
		t := newT()
		if err := json.Unmarshal(raw, t); err != nil {
			panic(err)
		}
		b, err := json.Marshal(t)
		if err != nil {
			panic(err)
		}
		h := fnv.New32a()
		h.Write(b)
		fmt.Printf("%08x %s\n", h.Sum32(), b)
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gojson structs|hash|blueprint-hash")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "structs":
		structs()
	case "hash":
		hash(func() *PodTemplate { return &PodTemplate{} })
	case "blueprint-hash":
		hash(func() *SandboxBlueprint { return &SandboxBlueprint{} })
	default:
		fmt.Fprintln(os.Stderr, "usage: gojson structs|hash|blueprint-hash")
		os.Exit(2)
	}
}
