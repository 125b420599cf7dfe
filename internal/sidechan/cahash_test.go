package sidechan

import (
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/goneli/goneli/internal/testkit"
)

// Subject hashes as OpenSSL 3.0 computes them (`openssl x509 -subject_hash`, run on certificates
// with these subjects): white space trimmed and collapsed, ASCII letters lowered, Latin-1 and
// BMPString text made UTF-8, a multi-valued RDN in DER order.
func TestSubjectHash(t *testing.T) {
	for _, tc := range []struct{ name, der, hash string }{
		{"C=DE, O=`  Goneli   Test<TAB>CA  ` (UTF8String), CN=Broker CA",
			"3040310b3009060355040613024445311d301b060355040a0c142020476f6e656c69202020546573740943412020311230100603550403130942726f6b6572204341", "ac2d6e98"},
		{"CN=Café Röot (T61String, Latin-1)", "30143112301006035504031409436166e92052f66f74", "ef0d12f1"},
		{"CN=Ab中 (BMPString)", "3011310f300d06035504031e06004100624e2d", "e6bf2086"},
		{"O=Zeta + CN=Alpha (one RDN)", "301d311b300b060355040a0c045a657461300c06035504031305416c706861", "94184468"},
		{"CN=MiXeD.Case.EXAMPLE (IA5String)", "301d311b3019060355040316124d695865442e436173652e4558414d504c45", "2d9a5c01"},
	} {
		der, err := hex.DecodeString(tc.der)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := subjectHash(der); err != nil || got != tc.hash {
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.hash)
		}
	}
}

// A directory given as ssl.ca.location is read as OpenSSL reads it: only a certificate under its
// subject's hash, <hash>.0 and on without a gap. Before, Go trusted every PEM file in it, so
// goneli's own connection trusted authorities that librdkafka's did not.
func TestCADirectoryAsOpenSSLReadsIt(t *testing.T) {
	p, other := testkit.NewPKI(t, "broker"), testkit.NewPKI(t, "broker")
	hash, err := subjectHash(p.CA.RawSubject)
	if err != nil {
		t.Fatal(err)
	}
	otherHash, _ := subjectHash(testkit.NewPKI(t, "x", "x").CA.RawSubject) // the same authority name: the same hash
	if otherHash != hash {
		t.Fatalf("two authorities of one name hash to %s and %s", hash, otherHash)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.CA.Raw})
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		trust bool
	}{
		{"under its hash", map[string][]byte{hash + ".0": caPEM}, true},
		{"after another under the same hash", map[string][]byte{
			hash + ".0": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.CA.Raw}), hash + ".1": caPEM}, true},
		{"under any other name", map[string][]byte{"ca.pem": caPEM}, false},
		{"under another name's hash", map[string][]byte{"0badcafe.0": caPEM}, false},
		{"after a gap", map[string][]byte{hash + ".1": caPEM}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			pool := x509.NewCertPool()
			err := appendCAs(pool, dir)
			if tc.trust != (err == nil) {
				t.Fatalf("appendCAs: %v; want trust %v", err, tc.trust)
			}
			leaf, err := x509.ParseCertificate(p.Server.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			_, verr := leaf.Verify(x509.VerifyOptions{Roots: pool})
			if trusted := verr == nil; trusted != tc.trust {
				t.Errorf("the broker's certificate verified: %v (%v); want %v", trusted, verr, tc.trust)
			}
		})
	}
}
