package httpapi

import (
	"encoding/json"
	"github.com/heraldhq/herald/auth"
	"net/http"

	"github.com/heraldhq/herald/catalog"
)

// kindsAPI serves GET /v1/kinds: every configured kind, by name, with its
// category, its channels and the params its templates read
// (catalog.Kind.Params says how they are found):
//
//	{"kinds": [{"name", "category", "channels": [...], "params": [{"name", "required"}]}]}
type kindsAPI struct {
	catalog *catalog.Catalog
}

type kindBody struct {
	Name     string          `json:"name"`
	Category string          `json:"category"`
	Channels []string        `json:"channels"`
	Params   []catalog.Param `json:"params"`
}

func (k *kindsAPI) list(w http.ResponseWriter, r *http.Request) {
	kinds := k.catalog.Kinds()
	out := make([]kindBody, 0, len(kinds))
	tenant := auth.Tenant(r.Context())
	for _, kd := range kinds {
		if !kd.For(tenant) {
			continue // another tenant's
		}
		b := kindBody{Name: kd.Name, Category: string(kd.Lane), Channels: make([]string, len(kd.Channels)), Params: kd.Params()}
		for i, ch := range kd.Channels {
			b.Channels[i] = string(ch)
		}
		out = append(out, b)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kinds": out})
}
