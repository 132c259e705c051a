package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Verify is the receiver's check of a delivery that docs/rollouts.md prints ("Verifying a
// delivery"), word for word, so that the code the documentation gives is the code the tests run
// (TestTheDocumentedReceiversAreTheTestedOnes). secret is the Secret's value (whsec_…); id,
// timestamp and signature are the headers webhook-id, webhook-timestamp and webhook-signature;
// body is the raw body, before any parsing. It refuses a timestamp further than five minutes
// (Tolerance) from now; a receiver that also drops the ids it accepted in the last ten minutes
// handles each delivery once.
func Verify(secret, id, timestamp, signature string, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(secret), "whsec_"))
	if err != nil {
		return errors.New("the secret is not whsec_ and base64")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return errors.New("webhook-timestamp is missing or more than 5 minutes away: a replay, or a clock off")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(signature) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return errors.New("no signature of webhook-signature verifies")
}
