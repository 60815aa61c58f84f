// Package s3x makes the S3 clients of the stores a location names: replay buffers,
// partitioned exports and playbook stores. It is apart from replay/location so that
// parsing a URI (config validation) does not link the AWS SDK.
package s3x

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/camproxy/camproxy/replay/location"
)

// defaultRegion is used when neither the URI nor the environment names a region.
const defaultRegion = "us-east-1"

// Client makes a client for a parsed S3 location with the default credential
// chain, its region (else the environment's, else us-east-1) and endpoint
// (path-style); it does not connect.
func Client(ctx context.Context, sp *location.Spec) (*s3.Client, error) {
	var opts []func(*config.LoadOptions) error
	if sp.Region != "" {
		opts = append(opts, config.WithRegion(sp.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: AWS config: %w", sp, err)
	}
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	endpoint := sp.Endpoint
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = &endpoint
			o.UsePathStyle = true
		}
		o.DisableLogOutputChecksumValidationSkipped = true
	}), nil
}
