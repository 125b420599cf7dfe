package sidechan

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// # ssl.ca.location as a directory
//
// librdkafka hands a directory given as ssl.ca.location to OpenSSL as a lookup directory
// (SSL_CTX_load_verify_locations with a path, rdkafka_ssl.c), and OpenSSL reads no file in it by
// its content: when it needs the issuer of a certificate it computes the hash of that issuer's name
// and opens <hash>.0, <hash>.1 and so on, until one is missing (by_dir.c,
// get_cert_by_subject_ex), as `openssl rehash` (c_rehash) names them. A certificate in any other
// file, or in a file named after another name's hash, is never found. Go trusts whatever it is
// given, so goneli's own connection takes from the directory only what OpenSSL would find there: a
// certificate in <hash>.<n> (n counting from 0 without a gap) whose subject hashes to <hash>. Should
// OpenSSL find more (it keeps what a file held beside the certificate it looked for), Go trusts
// less, and a broker it then refuses makes the connection give way to librdkafka (client.go); it
// never trusts a certificate that librdkafka would not.

// hashedName matches a file that OpenSSL looks up first for a name hash: <hash>.0.
var hashedName = regexp.MustCompile(`^[0-9a-f]{8}\.0$`)

// appendHashedCAs adds to pool the certificates that OpenSSL finds in dir, and reports whether it
// added any.
func appendHashedCAs(pool *x509.CertPool, dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	found := false
	for _, e := range entries {
		if !hashedName.MatchString(e.Name()) {
			continue
		}
		hash := e.Name()[:8]
		for n := 0; ; n++ {
			data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.%d", hash, n)))
			if err != nil {
				break
			}
			certs := pemCertificates(data)
			if len(certs) == 0 {
				// OpenSSL stops at a file it loads nothing from.
				break
			}
			for _, c := range certs {
				if h, err := subjectHash(c.RawSubject); err == nil && h == hash {
					pool.AddCert(c)
					found = true
				}
			}
		}
	}
	return found, nil
}

// pemCertificates parses the CERTIFICATE blocks of a PEM file, leaving out those Go cannot parse.
func pemCertificates(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// subjectHash is OpenSSL's X509_NAME_hash of a DER-encoded name, as `openssl x509 -subject_hash`
// prints it: the first four bytes of the SHA-1 of the name's canonical encoding, little-endian, in
// eight hex digits. The canonical encoding (x509_name_canon, crypto/x509/x_name.c) is the DER of
// each relative distinguished name's SET, one after another without the name's own SEQUENCE, with
// every value of a string type converted to UTF8String, spaces trimmed at both ends and collapsed
// within, and ASCII letters lowered (asn1_string_canon).
func subjectHash(rawName []byte) (string, error) {
	canon, err := canonicalName(rawName)
	if err != nil {
		return "", err
	}
	sum := sha1.Sum(canon)
	return fmt.Sprintf("%08x", binary.LittleEndian.Uint32(sum[:4])), nil
}

// canonicalName is the canonical encoding of a DER-encoded name (see subjectHash).
func canonicalName(rawName []byte) ([]byte, error) {
	var rdns []asn1.RawValue
	if rest, err := asn1.Unmarshal(rawName, &rdns); err != nil || len(rest) > 0 {
		return nil, errors.New("x509: malformed name")
	}
	var out []byte
	for _, rdn := range rdns {
		if rdn.Class != asn1.ClassUniversal || rdn.Tag != asn1.TagSet {
			return nil, errors.New("x509: malformed relative distinguished name")
		}
		var atvs [][]byte
		for rest := rdn.Bytes; len(rest) > 0; {
			var atv struct {
				Type  asn1.RawValue
				Value asn1.RawValue
			}
			var err error
			if rest, err = asn1.Unmarshal(rest, &atv); err != nil || atv.Type.Tag != asn1.TagOID {
				return nil, errors.New("x509: malformed attribute")
			}
			value, err := canonicalValue(atv.Value)
			if err != nil {
				return nil, err
			}
			enc, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true,
				Bytes: append(slices.Clip(atv.Type.FullBytes), value...)})
			if err != nil {
				return nil, err
			}
			atvs = append(atvs, enc)
		}
		// DER orders a SET OF by its elements' encodings, as OpenSSL's encoder does.
		slices.SortFunc(atvs, bytes.Compare)
		enc, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: bytes.Join(atvs, nil)})
		if err != nil {
			return nil, err
		}
		out = append(out, enc...)
	}
	return out, nil
}

// ASN.1 string types that encoding/asn1 names no constant for.
const (
	tagVisibleString   = 26
	tagUniversalString = 28
)

// canonicalValue is an attribute value's canonical encoding: a value of one of the string types
// OpenSSL canonicalises (ASN1_MASK_CANON), as a UTF8String of its canonical text; any other value
// as it is.
func canonicalValue(v asn1.RawValue) ([]byte, error) {
	if v.Class != asn1.ClassUniversal || v.IsCompound {
		return v.FullBytes, nil
	}
	var text []byte
	switch v.Tag {
	case asn1.TagUTF8String:
		if !utf8.Valid(v.Bytes) {
			return nil, errors.New("x509: attribute value is not UTF-8")
		}
		text = v.Bytes
	case asn1.TagPrintableString, asn1.TagT61String, asn1.TagIA5String, tagVisibleString:
		// One byte a character, read as Latin-1 (ASN1_STRING_to_UTF8).
		for _, c := range v.Bytes {
			text = utf8.AppendRune(text, rune(c))
		}
	case asn1.TagBMPString:
		if len(v.Bytes)%2 != 0 {
			return nil, errors.New("x509: malformed BMPString")
		}
		units := make([]uint16, len(v.Bytes)/2)
		for i := range units {
			units[i] = binary.BigEndian.Uint16(v.Bytes[2*i:])
		}
		for _, r := range utf16.Decode(units) {
			text = utf8.AppendRune(text, r)
		}
	case tagUniversalString:
		if len(v.Bytes)%4 != 0 {
			return nil, errors.New("x509: malformed UniversalString")
		}
		for i := 0; i < len(v.Bytes); i += 4 {
			text = utf8.AppendRune(text, rune(binary.BigEndian.Uint32(v.Bytes[i:])))
		}
	default:
		return v.FullBytes, nil
	}
	return asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagUTF8String, Bytes: canonicalText(text)})
}

// canonicalText trims ASCII white space at both ends, collapses each run of it within into one
// space, and lowers ASCII letters; other bytes stay as they are (asn1_string_canon).
func canonicalText(s []byte) []byte {
	space := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' }
	for len(s) > 0 && space(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && space(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case space(c):
			out = append(out, ' ')
			for i+1 < len(s) && space(s[i+1]) {
				i++
			}
		case 'A' <= c && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			out = append(out, c)
		}
	}
	return out
}
