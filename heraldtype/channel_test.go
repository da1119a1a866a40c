package heraldtype_test

import (
	"testing"

	"github.com/heraldhq/herald/heraldtype"
)

// A send to one device carries its device in its channel; Base and Device
// take it apart again, and every other channel is its own base.
func TestDeviceSend(t *testing.T) {
	t.Parallel()
	send := heraldtype.DeviceSend(heraldtype.ChannelPush, "d0123456789abcdef")
	if send != "push.d0123456789abcdef" || send.Base() != heraldtype.ChannelPush || send.Device() != "d0123456789abcdef" {
		t.Fatalf("DeviceSend = %q, Base %q, Device %q", send, send.Base(), send.Device())
	}
	for _, ch := range append(heraldtype.Channels, heraldtype.ChannelInbox) {
		if ch.Base() != ch || ch.Device() != "" {
			t.Errorf("%s: Base %q, Device %q; want itself and none", ch, ch.Base(), ch.Device())
		}
	}
}
