package testkit

import (
	"encoding/json"
	"net/http"
)

// Readyz asks a camproxy admin plane (base URL http://host:port) for /readyz: its
// HTTP status, "ready" | "degraded" | "not ready", and the degraded checks with
// their reasons. A request that fails gives status 0.
func Readyz(admin string) (code int, status string, degraded map[string]string) {
	resp, err := http.Get(admin + "/readyz")
	if err != nil {
		return 0, "", nil
	}
	defer resp.Body.Close()
	var v struct {
		Status   string            `json:"status"`
		Degraded map[string]string `json:"degraded"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v.Status, v.Degraded
}
