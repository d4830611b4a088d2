package node

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node/client"
)

// fill sets every field of v (recursively) to a non-zero value, so that a
// JSON round trip shows every key.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(1)
	case reflect.Float64, reflect.Float32:
		v.SetFloat(1)
	case reflect.Bool:
		v.SetBool(true)
	}
}

// TestClientTypesMatchMoA: swarmctl cannot import moa (it links no cgo), so
// the client mirrors moa's result types. Every key one writes, the other
// reads, and back.
func TestClientTypesMatchMoA(t *testing.T) {
	pairs := []struct{ server, client any }{
		{&moa.Result{}, &client.QueryResult{}},
		{&moa.AgentResponse{}, &client.AgentResponse{}},
	}
	for _, p := range pairs {
		fill(reflect.ValueOf(p.server).Elem())
		b, _ := json.Marshal(p.server)
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(p.client); err != nil {
			t.Fatalf("%T does not read every key %T writes: %v", p.client, p.server, err)
		}
		var a, c map[string]any
		json.Unmarshal(b, &a)
		cb, _ := json.Marshal(p.client)
		json.Unmarshal(cb, &c)
		for k := range a {
			if _, ok := c[k]; !ok {
				t.Errorf("%T drops key %q", p.client, k)
			}
		}
	}
}
