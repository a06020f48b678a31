package upgrade

import "net"

// Notify sends state to systemd's notification socket (socket: the
// process's $NOTIFY_SOCKET, which main reads), as sd_notify(3) does: one
// datagram of newline-separated assignments ("READY=1",
// "MAINPID=4242\nREADY=1", "STOPPING=1"). It does nothing when socket is
// empty (not run by systemd with Type=notify). An address starting with
// '@' is in the abstract namespace.
func Notify(socket, state string) error {
	addr := socket
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
