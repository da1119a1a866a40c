package inbox

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/heraldhq/herald/auth"
	"github.com/heraldhq/herald/heraldtype"
	"github.com/heraldhq/herald/problem"
	"github.com/heraldhq/herald/store"
)

// receiptBody is a receipt: the message id of the push the app showed, as
// the push carried it.
type receiptBody struct {
	MessageID string `json:"message_id"`
}

// ReceiptRetryAfter is the Retry-After, in seconds, of a receipt that came
// before its send was settled.
const ReceiptRetryAfter = 5

// maxMessageID bounds a message id (100 characters as herald makes them).
const maxMessageID = 256

// Receipt serves POST /v1/me/receipts {"message_id"}: the app showed that
// push, which proves it was delivered (store.Receipts).
//
//	204  the delivery is DELIVERED now: it was PROVIDER_ACCEPTED, or
//	     UNKNOWN (the receipt settles it), or DELIVERED already (a repeated
//	     receipt changes nothing)
//	404  no message of this recipient has that id (another recipient's is
//	     not found either)
//	409  with Retry-After: 5, the send is not settled yet: herald's
//	     provider call may still be in flight (SENDING), or it waits for a
//	     retry. Send the receipt again after Retry-After seconds; it
//	     settles once the provider's answer is recorded.
//	409  without Retry-After: the delivery ended without a send a receipt
//	     can confirm (PERMANENT_FAILURE, RETRY_EXHAUSTED, SUPPRESSED); a
//	     delivery never goes back. Do not send it again.
//	422  no message_id, or one over 256 characters, or the message is
//	     this recipient's but not a push (an SMS, an e-mail, a webhook,
//	     the inbox item): the app's receipt is its word that it showed a
//	     push, and a send key can mint a recipient token, so a receipt
//	     must never settle another channel (an UNKNOWN SMS is a person's
//	     to settle: package settle, admin scope, audited)
func (a *API) Receipt(w http.ResponseWriter, r *http.Request) {
	rc, ok := auth.RequiredRecipient(w, r)
	if !ok {
		return
	}
	var body receiptBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	if body.MessageID == "" || len(body.MessageID) > maxMessageID {
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "message_id",
			Detail: "message_id must be the push's message id (1..256 characters)"})
		return
	}
	out, err := a.Store.DeliveryReceipt(r.Context(), rc.Tenant, rc.ID, body.MessageID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		problem.New(w, http.StatusNotFound, "no such message for this recipient")
		return
	case err != nil:
		a.storeFailed(w, r, "record a receipt", err)
		return
	}
	switch out.Result {
	case store.ReceiptDelivered:
		a.Metrics.Receipt(out.From)
		a.Metrics.Delivery(out.Lane, out.Channel, heraldtype.DeliveryDelivered)
	case store.ReceiptAlready:
	case store.ReceiptNotPush:
		problem.Write(w, problem.Problem{Status: http.StatusUnprocessableEntity, Param: "message_id",
			Detail: "message_id names this recipient's " + string(out.Channel.Base()) + " send: a receipt confirms a push the app showed, and no other channel"})
		return
	case store.ReceiptNotYet:
		w.Header().Set("Retry-After", strconv.Itoa(ReceiptRetryAfter))
		problem.New(w, http.StatusConflict, "the push is not settled yet (its provider call may still be in flight): send the receipt again after Retry-After seconds")
		return
	default:
		problem.New(w, http.StatusConflict, "the delivery ended "+string(out.From)+", which a receipt cannot change")
		return
	}
	noContent(w)
}
