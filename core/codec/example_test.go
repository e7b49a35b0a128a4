package codec_test

import (
	"fmt"
	"strings"

	"github.com/dbinformer/dbinformer/core/codec"
)

type user struct {
	Name  string `json:"name"`
	Admin bool   `json:"admin"`
}

// JSON is the adapters' default; Decode is how an adapter calls any codec,
// turning a panic into an error, and Funcs makes a codec of two functions.
func ExampleJSON() {
	var c codec.Codec[user] = codec.JSON[user]{}
	data, err := codec.Encode(c, user{Name: "ada", Admin: true})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(data))
	u, err := codec.Decode(c, data)
	fmt.Println(u, err)

	upper := codec.Funcs[string]{
		EncodeFunc: func(s string) ([]byte, error) { return []byte(strings.ToUpper(s)), nil },
		DecodeFunc: func(b []byte) (string, error) { return string(b), nil },
	}
	b, _ := upper.Encode("hi")
	fmt.Println(string(b))

	panicky := codec.Funcs[string]{DecodeFunc: func([]byte) (string, error) { panic("bad byte") }}
	_, err = codec.Decode(panicky, []byte{1})
	fmt.Println(err)
	// Output:
	// {"name":"ada","admin":true}
	// {ada true} <nil>
	// HI
	// codec panicked: bad byte
}
