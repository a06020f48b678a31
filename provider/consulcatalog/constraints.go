package consulcatalog

import "github.com/tollgate-proxy/tollgate/provider/constraints"

// parseConstraints compiles a constraints expression over tags (Tag,
// TagRegex, &&, ||, !). An empty expression keeps every instance (nil).
func parseConstraints(expression string) (func([]string) bool, error) {
	e, err := constraints.ParseTags(expression)
	if err != nil || e == nil {
		return nil, err
	}
	return e.MatchTags, nil
}
