package rulesvc

import (
	_ "embed"
	"net/http"
)

// openAPI describes the admin API in OpenAPI 3.1. TestOpenAPI checks it
// against the routes the service serves and the bodies its handlers take
// and answer, and rewrites it with -update.
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI answers GET /admin/v1/openapi.json.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(openAPI)
}
