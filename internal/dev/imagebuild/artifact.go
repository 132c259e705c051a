package imagebuild

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// MediaTypeEmptyJSON is the media type of the empty config ("{}") of an OCI 1.1 artifact.
const MediaTypeEmptyJSON types.MediaType = "application/vnd.oci.empty.v1+json"

// emptyJSON is the content of the empty config.
var emptyJSON = []byte("{}")

// artifact is an OCI 1.1 artifact manifest with an empty config and one blob, referring to a
// subject, as the OCI image spec recommends for SBOMs and signatures. Its manifest is written
// once, byte for byte, so its digest depends only on the blob, the subject and the annotations.
type artifact struct {
	manifest []byte
	blob     v1.Layer
	config   v1.Layer
}

// newArtifact makes the artifact of data (of mediaType, which is also its artifactType) whose
// subject is the manifest subject.
func newArtifact(mediaType string, data []byte, subject v1.Descriptor, annotations map[string]string) (v1.Image, error) {
	blob := static.NewLayer(data, types.MediaType(mediaType))
	config := static.NewLayer(emptyJSON, MediaTypeEmptyJSON)
	blobDesc, err := partial.Descriptor(blob)
	if err != nil {
		return nil, fmt.Errorf("describe %s blob: %w", mediaType, err)
	}
	configDesc, err := partial.Descriptor(config)
	if err != nil {
		return nil, fmt.Errorf("describe empty config: %w", err)
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  mediaType,
		Config:        *configDesc,
		Layers:        []v1.Descriptor{*blobDesc},
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations:   annotations,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s artifact manifest: %w", mediaType, err)
	}
	img, err := partial.CompressedToImage(&artifact{manifest: raw, blob: blob, config: config})
	if err != nil {
		return nil, fmt.Errorf("make %s artifact: %w", mediaType, err)
	}
	return img, nil
}

// RawConfigFile implements partial.CompressedImageCore.
func (a *artifact) RawConfigFile() ([]byte, error) { return bytes.Clone(emptyJSON), nil }

// MediaType implements partial.CompressedImageCore.
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// RawManifest implements partial.CompressedImageCore.
func (a *artifact) RawManifest() ([]byte, error) { return bytes.Clone(a.manifest), nil }

// LayerByDigest implements partial.CompressedImageCore.
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, l := range []v1.Layer{a.blob, a.config} {
		d, err := l.Digest()
		if err != nil {
			return nil, fmt.Errorf("digest artifact blob: %w", err)
		}
		if d == h {
			return l, nil
		}
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}
