// Package mad codes the part every InfiniBand management datagram shares:
// the 24-octet common header (base version, management class, class
// version, method with its response bit, status, class-specific word,
// transaction ID, attribute ID and modifier), and the framing check a
// decoder of one class makes before it reads further (exactly 256
// octets, base version 1, the class and class version it speaks).
//
// It is the seam between the class packages and the wire: package cm
// (Communication Management, class 0x07) and package sa (Subnet
// Administration, class 0x03) both read and write their MADs' first 24
// octets here and add what their class defines after it. The transports
// that carry MADs (softib's QP1, ib_umad) live behind ib.MADService and
// never look inside. Errors are *ib.FieldError, as in every codec of
// ipoibd, naming the field that was wrong. The layouts are in
// docs/ib-cm-messages.md.
//
// The package imports only the standard library and ib.
package mad
