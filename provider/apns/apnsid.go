package apns

import (
	"crypto/sha1"
	"encoding/hex"
)

// idNamespace is the RFC 9562 namespace of herald's apns-id values:
// uuid5(NAMESPACE_URL, "https://github.com/heraldhq/herald#apns-id"),
// 1ab5c13e-110e-5c7d-bdee-cd603043098c.
var idNamespace = [16]byte{
	0x1a, 0xb5, 0xc1, 0x3e, 0x11, 0x0e, 0x5c, 0x7d,
	0xbd, 0xee, 0xcd, 0x60, 0x30, 0x43, 0x09, 0x8c,
}

// APNsID is the apns-id herald sends for a message: APNs wants a canonical
// UUID there, and a herald message id is not one, so the id is the
// name-based (version 5, SHA-1) UUID of the message id in herald's own
// namespace. The same message id always gives the same apns-id, on every
// process and every copy, so a person holding a message id can find the
// notification in Apple's tools: in Python,
//
//	ns = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/heraldhq/herald#apns-id")
//	uuid.uuid5(ns, message_id)
func APNsID(messageID string) string {
	return uuid5(idNamespace, messageID)
}

// uuid5 is RFC 9562 §5.5: SHA-1 of namespace and name, version 5, the
// RFC 9562 variant, written in the canonical lowercase 8-4-4-4-12 form.
func uuid5(ns [16]byte, name string) string {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80

	var out [36]byte
	hex.Encode(out[0:8], u[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], u[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], u[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], u[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], u[10:16])
	return string(out[:])
}
