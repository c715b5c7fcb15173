// Command mcsched-image builds a container image from a root filesystem directory, with no
// container engine, base image or registry: one layer holding the directory's tree, an
// image configuration from flags, written as a `docker load`-able archive (which
// `ctr images import` and `kind load image-archive` read too) and as an OCI image layout.
//
//	mcsched-image --rootfs DIR --ref REF --entrypoint /mcsched-agent --user 65532:65532 \
//	    --docker-archive out.tar [--oci-layout DIR] [--env K=V]... [--expose 10259/tcp]...
//
// The layer is reproducible: entries in lexical order, owned by root, timestamps from
// $SOURCE_DATE_EPOCH (else the Unix epoch), so the same tree gives the same digest.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

type options struct {
	rootfs        string
	ref           string
	entrypoint    list
	cmd           list
	user          string
	workdir       string
	env           list
	expose        list
	labels        list
	platform      string
	dockerArchive string
	ociLayout     string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("mcsched-image", flag.ContinueOnError)
	fs.StringVar(&o.rootfs, "rootfs", "", "directory whose tree becomes the image's only layer")
	fs.StringVar(&o.ref, "ref", "", "image reference to tag the image with, e.g. ghcr.io/mcsched/mcsched-agent:v0.1.0")
	fs.Var(&o.entrypoint, "entrypoint", "entrypoint word (repeatable, in order)")
	fs.Var(&o.cmd, "cmd", "cmd word (repeatable, in order)")
	fs.StringVar(&o.user, "user", "", "user the container runs as, UID[:GID]")
	fs.StringVar(&o.workdir, "workdir", "/", "working directory")
	fs.Var(&o.env, "env", "environment variable K=V (repeatable)")
	fs.Var(&o.expose, "expose", "exposed port, PORT/PROTO (repeatable)")
	fs.Var(&o.labels, "label", "image label K=V (repeatable)")
	fs.StringVar(&o.platform, "platform", "linux/amd64", "OS/ARCH[/VARIANT] of the files in --rootfs")
	fs.StringVar(&o.dockerArchive, "docker-archive", "", "write a `docker load` archive here")
	fs.StringVar(&o.ociLayout, "oci-layout", "", "write (or add to) an OCI image layout in this directory")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.rootfs == "" || o.ref == "" {
		return o, errors.New("--rootfs and --ref are required")
	}
	if o.dockerArchive == "" && o.ociLayout == "" {
		return o, errors.New("give --docker-archive, --oci-layout or both")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcsched-image: %v\n", err)
		os.Exit(2)
	}
	if err := build(o); err != nil {
		fmt.Fprintf(os.Stderr, "mcsched-image: %v\n", err)
		os.Exit(1)
	}
}

func build(o options) error {
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		secs, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		created = time.Unix(secs, 0).UTC()
	}
	ref, err := name.ParseReference(o.ref)
	if err != nil {
		return fmt.Errorf("--ref: %w", err)
	}
	platform, err := v1.ParsePlatform(o.platform)
	if err != nil {
		return fmt.Errorf("--platform: %w", err)
	}

	layerTar, err := tarTree(o.rootfs, created)
	if err != nil {
		return fmt.Errorf("layer from %s: %w", o.rootfs, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "mcsched-image --rootfs " + filepath.Base(o.rootfs),
			Comment:   "root filesystem",
		},
	})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS = platform.OS
	cf.Architecture = platform.Architecture
	cf.Variant = platform.Variant
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = o.entrypoint
	cf.Config.Cmd = o.cmd
	cf.Config.User = o.user
	cf.Config.WorkingDir = o.workdir
	cf.Config.Env = o.env
	if len(o.expose) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range o.expose {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	if len(o.labels) > 0 {
		cf.Config.Labels = map[string]string{}
		for _, l := range o.labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return fmt.Errorf("--label %q is not K=V", l)
			}
			cf.Config.Labels[k] = v
		}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if o.dockerArchive != "" {
		if err := os.MkdirAll(filepath.Dir(o.dockerArchive), 0o755); err != nil {
			return err
		}
		tmp := o.dockerArchive + ".tmp"
		if err := tarball.WriteToFile(tmp, ref, img); err != nil {
			return fmt.Errorf("docker archive: %w", err)
		}
		if err := os.Rename(tmp, o.dockerArchive); err != nil {
			return err
		}
		fmt.Printf("wrote %s (%s, %s)\n", o.dockerArchive, ref.Name(), digest)
	}
	if o.ociLayout != "" {
		if err := writeLayout(o.ociLayout, ref, img, platform); err != nil {
			return fmt.Errorf("OCI layout: %w", err)
		}
		fmt.Printf("wrote OCI layout %s (%s, %s)\n", o.ociLayout, ref.Name(), digest)
	}
	return nil
}

// writeLayout adds img to the OCI layout at dir under ref's name, replacing an image of
// the same name and platform (so a release can gather one image per platform there).
func writeLayout(dir string, ref name.Reference, img v1.Image, platform *v1.Platform) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return err
		}
	}
	return p.ReplaceImage(img, func(d v1.Descriptor) bool {
		return d.Annotations["org.opencontainers.image.ref.name"] == ref.Name() &&
			d.Platform != nil && d.Platform.OS == platform.OS && d.Platform.Architecture == platform.Architecture
	}, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.Name(),
		// What `ctr images import` names the image after.
		"io.containerd.image.name": ref.Name(),
	}), layout.WithPlatform(*platform))
}

// tarTree makes an uncompressed tar of the tree under root, paths relative to it, in
// lexical order, every entry owned by root and dated t; regular files, directories and
// symbolic links only.
func tarTree(root string, t time.Time) ([]byte, error) {
	var paths []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != root {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, path := range paths {
		info, err := os.Lstat(path)
		if err != nil {
			return nil, err
		}
		link := ""
		switch {
		case info.Mode().IsRegular(), info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(path); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s: only files, directories and symbolic links go into an image", path)
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil, err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = t, time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		hdr.PAXRecords = nil
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
