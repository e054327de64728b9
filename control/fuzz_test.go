package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeRequest: whatever a peer sends, DecodeRequest returns a
// request or an *Error of a request's codes, never panics, and a request
// it takes survives being encoded and decoded again.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"cmd":"show"}`,
		`{"cmd":"child-add","child":{"pkey":"0x8001","name":"p","addrs":["10.0.0.1/24"],"mode":"connected","mtu":65520,"netns":"/run/netns/x","owner":"o"}}`,
		`{"cmd":"child-del","name":"0x8001"}`,
		`{"cmd":"neigh-flush","ip":"fe80::1"}`,
		`{"cmd":"mode","name":"datagram"}`,
		`{"cmd":"frob"}`,
		`{"cmd":"child-add"}`,
		`{"cmd":"show"} trailing`,
		`[1,2`,
		``,
		`{"cmd":"show","name":"` + strings.Repeat("x", MaxRequest) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeRequest(bytes.NewReader(data))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Code != CodeBadRequest && e.Code != CodeUnknownCommand) {
				t.Fatalf("%q: %v (%T)", data, err, err)
			}
			return
		}
		raw, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeRequest(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%q re-encoded as %s: %v", data, raw, err)
		}
		if !reflect.DeepEqual(again, req) {
			t.Fatalf("%q: %+v, then %+v", data, req, again)
		}
	})
}
