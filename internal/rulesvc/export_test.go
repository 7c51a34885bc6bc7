package rulesvc

// AdminPatterns returns the mux patterns of the admin API, such as
// "GET /admin/v1/rules".
func AdminPatterns(s *Service) []string {
	var ps []string
	for _, rt := range s.adminRouteTable() {
		ps = append(ps, rt.method+" "+AdminPrefix+rt.path)
	}
	return ps
}
