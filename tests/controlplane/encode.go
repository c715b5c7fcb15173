package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// runEncode reads objects as JSON from stdin, one a line, each with its apiVersion and
// kind (a v1 Binding, an events.k8s.io/v1 Event: any kind client-go's scheme knows), and
// prints for each the sizes of the request bodies client-go's typed clients send for it,
// as kube-scheduler sends them: "<protobuf bytes> <JSON bytes>". A test compares the
// bodies the API server measured from another client with these.
func runEncode(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("no arguments expected, got %q", args)
	}
	// What a clientset's REST client encodes with (rest.CodecFactoryForGeneratedClient:
	// scheme.Codecs without conversion), for each content type.
	codecs := scheme.Codecs.WithoutConversion()
	decoder := scheme.Codecs.UniversalDeserializer()
	size := func(obj runtime.Object, mediaType string) (int, error) {
		info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
		if !ok {
			return 0, fmt.Errorf("no serializer for %s", mediaType)
		}
		gv := obj.GetObjectKind().GroupVersionKind().GroupVersion()
		b, err := runtime.Encode(codecs.EncoderForVersion(info.Serializer, gv), obj)
		return len(b), err
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for line := 1; in.Scan(); line++ {
		text := strings.TrimSpace(in.Text())
		if text == "" {
			continue
		}
		obj, _, err := decoder.Decode([]byte(text), nil, nil)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		pb, err := size(obj, runtime.ContentTypeProtobuf)
		if err != nil {
			return fmt.Errorf("line %d: protobuf: %w", line, err)
		}
		js, err := size(obj, runtime.ContentTypeJSON)
		if err != nil {
			return fmt.Errorf("line %d: JSON: %w", line, err)
		}
		fmt.Fprintf(out, "%d %d\n", pb, js)
	}
	return in.Err()
}
