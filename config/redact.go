package config

// Redacted takes the place of a private key wherever a configuration is
// shown (the admin API, `tollgate check`'s report). The file provider reads
// key files into the configuration (README, "TLS"), so what is shown would
// otherwise hold the keys themselves.
const Redacted = "REDACTED"

func redactKey(c Certificate) Certificate {
	if c.KeyFile != "" {
		c.KeyFile = Redacted
	}
	return c
}

// RedactTLS returns a copy of t with every private key Redacted (nil for
// nil). t is not modified.
func RedactTLS(t *TLSConfiguration) *TLSConfiguration {
	if t == nil {
		return nil
	}
	out := *t
	out.Certificates = make([]*CertAndStores, 0, len(t.Certificates))
	for _, c := range t.Certificates {
		if c == nil {
			continue
		}
		cp := *c
		cp.Certificate = redactKey(c.Certificate)
		out.Certificates = append(out.Certificates, &cp)
	}
	if t.Stores != nil {
		out.Stores = make(map[string]TLSStore, len(t.Stores))
		for n, st := range t.Stores {
			if st.DefaultCertificate != nil {
				c := redactKey(*st.DefaultCertificate)
				st.DefaultCertificate = &c
			}
			out.Stores[n] = st
		}
	}
	return &out
}

// RedactTransports returns copies of the servers transports with the keys
// of their client certificates Redacted. m is not modified.
func RedactTransports(m map[string]*TCPServersTransport) map[string]*TCPServersTransport {
	if m == nil {
		return nil
	}
	out := make(map[string]*TCPServersTransport, len(m))
	for n, st := range m {
		if st != nil && st.TLS != nil && len(st.TLS.Certificates) > 0 {
			cp := *st
			tl := *st.TLS
			tl.Certificates = make([]Certificate, len(st.TLS.Certificates))
			for i, c := range st.TLS.Certificates {
				tl.Certificates[i] = redactKey(c)
			}
			cp.TLS = &tl
			st = &cp
		}
		out[n] = st
	}
	return out
}
