package twilio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/heraldhq/herald/provider"
	"github.com/heraldhq/herald/provider/httpcall"
)

// ErrNoSid is Status's answer to a query without Twilio's sid: Twilio
// cannot be asked by herald's message id.
var ErrNoSid = fmt.Errorf("twilio status: a look-up needs the message sid Twilio answered (ProviderRef); Twilio cannot be asked by herald's message id: %w", provider.ErrNoReference)

// Status fetches the Message resource q.ProviderRef names and reports what
// its status proves. A 404 is ReportNotFound; any other failure is an error.
func (t *Twilio) Status(ctx context.Context, q provider.StatusQuery) (provider.Report, error) {
	if q.ProviderRef == "" {
		return provider.Report{}, ErrNoSid
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	req, err := t.newRequest(ctx, http.MethodGet, t.messagesURL+"/"+url.PathEscape(q.ProviderRef)+".json", "")
	if err != nil {
		return provider.Report{}, fmt.Errorf("twilio status: build request: %w", err)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL
		}
		return provider.Report{}, fmt.Errorf("twilio status: fetch message: %w", err)
	}
	body := httpcall.ReadBody(resp)
	switch reason := answerReason(resp.StatusCode, body); resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return provider.Report{MessageID: q.MessageID, ProviderRef: q.ProviderRef, Result: provider.ReportNotFound, Reason: reason}, nil
	default:
		return provider.Report{}, fmt.Errorf("twilio status: fetch message answered %d (%s)", resp.StatusCode, reason)
	}
	var msg message
	if err := json.Unmarshal(body, &msg); err != nil {
		return provider.Report{}, errors.New("twilio status: the Message resource is not readable JSON")
	}
	rep, ok := report(msg.Status, int(msg.ErrorCode))
	if !ok {
		return provider.Report{}, fmt.Errorf("twilio status: message status %s is not an outbound one", statusWord(msg.Status))
	}
	rep.MessageID = q.MessageID
	rep.ProviderRef = q.ProviderRef
	if at, err := time.Parse(time.RFC1123Z, msg.DateUpdated); err == nil {
		rep.At = at
	}
	return rep, nil
}

// answerReason names a refusal: Twilio's error code when the body has one,
// else the HTTP status.
func answerReason(status int, body []byte) string {
	if c := errorCode(body); c != 0 {
		return reasonFor(c)
	}
	return "HTTP_" + strconv.Itoa(status)
}
