package console

import (
	"net/http"
	"strings"

	"github.com/sluice-rl/sluice/admin"
)

// explainView is the explain page's data: the question and, once asked,
// the admin API's answer.
type explainView struct {
	Key, Method, Path string
	// Region asks for that region's shares of the limits, which the
	// service reads from the quota balancer it is given; empty for none.
	Region  string
	Methods []string
	Answer  *admin.Explanation
}

var explainMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}

func (c *Console) explainPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.render(w, r, http.StatusOK, "explain", s, explainView{Method: "GET", Path: "/", Methods: explainMethods})
}

// explain asks GET /admin/v1/explain with the posted key and request.
func (c *Console) explain(w http.ResponseWriter, r *http.Request, s *session) {
	v := explainView{Key: r.PostFormValue("key"), Method: strings.ToUpper(strings.TrimSpace(r.PostFormValue("method"))),
		Path: strings.TrimSpace(r.PostFormValue("path")), Region: strings.TrimSpace(r.PostFormValue("region")), Methods: explainMethods}
	e, err := c.api.client(s).ExplainRegion(r.Context(), v.Key, v.Method, v.Path, v.Region)
	if err != nil {
		c.fail(w, r, s, Prefix+"/explain", err)
		return
	}
	v.Answer = &e
	c.render(w, r, http.StatusOK, "explain", s, v)
}
