package cm

// RTUPrivateDataLen is the size of an RTU's private data.
const RTUPrivateDataLen = 224

// RTU tells the replier that the connection is ready to use (IBA Table 111).
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataLen]byte
}

// AttrID implements Message.
func (m *RTU) AttrID() AttrID { return AttrRTU }

func (m *RTU) validate() error { return nil }

// MarshalMAD implements Message.
func (m *RTU) MarshalMAD(b []byte, tid uint64) error {
	p, err := startMAD(b, tid, AttrRTU)
	if err != nil {
		return err
	}
	putCommIDs(p, m.LocalCommID, m.RemoteCommID, m.PrivateData[:])
	return nil
}

// DecodeRTU decodes an RTU from a 232-octet CM payload.
func DecodeRTU(p []byte) (RTU, error) {
	if err := checkPayload("RTU", p); err != nil {
		return RTU{}, err
	}
	local, remote := commIDs(p)
	return RTU{LocalCommID: local, RemoteCommID: remote, PrivateData: [RTUPrivateDataLen]byte(p[8:])}, nil
}
