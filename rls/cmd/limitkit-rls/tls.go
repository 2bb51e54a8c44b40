package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"

	"github.com/limitkit/limitkit/rls/internal/certreload"
)

// serverTLS is the gRPC listener's TLS (GRPC_SERVER_USE_TLS): its
// certificate and key, and the client CA when set (client certificates
// then required, with GRPC_CLIENT_TLS_SAN when set), read again when the
// files change; open connections keep theirs.
func (srv *server) serverTLS() (*tls.Config, error) {
	s := srv.s
	r, err := certreload.New(certreload.Files{Cert: s.GrpcServerTLSCert, Key: s.GrpcServerTLSKey, CA: s.GrpcClientTLSCACert,
		Name: "GRPC_SERVER_TLS_CERT/KEY, GRPC_CLIENT_TLS_CACERT"}, s.TLSReloadInterval, srv.log)
	if err != nil {
		return nil, err
	}
	var verify func([][]*x509.Certificate) error
	if san := s.GrpcClientTLSSAN; san != "" {
		verify = func(chains [][]*x509.Certificate) error {
			if !certreload.HasSAN(chains, san) {
				return errors.New("the client certificate does not carry GRPC_CLIENT_TLS_SAN")
			}
			return nil
		}
	}
	return r.ServerConfig(verify), nil
}
