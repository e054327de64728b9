package cm

// DREPPrivateDataLen is the size of a DREP's private data.
const DREPPrivateDataLen = 224

// DREP answers a DREQ (IBA Table 113).
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateDataLen]byte
}

// AttrID implements Message.
func (m *DREP) AttrID() AttrID { return AttrDREP }

func (m *DREP) validate() error { return nil }

// MarshalMAD implements Message.
func (m *DREP) MarshalMAD(b []byte, tid uint64) error {
	p, err := startMAD(b, tid, AttrDREP)
	if err != nil {
		return err
	}
	putCommIDs(p, m.LocalCommID, m.RemoteCommID, m.PrivateData[:])
	return nil
}

// DecodeDREP decodes a DREP from a 232-octet CM payload.
func DecodeDREP(p []byte) (DREP, error) {
	if err := checkPayload("DREP", p); err != nil {
		return DREP{}, err
	}
	local, remote := commIDs(p)
	return DREP{LocalCommID: local, RemoteCommID: remote, PrivateData: [DREPPrivateDataLen]byte(p[8:])}, nil
}
