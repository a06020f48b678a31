package consulcatalog

import "errors"

// parseConstraints compiles a constraints expression over tags (Tag,
// TagRegex, &&, ||, !). An empty expression keeps every instance (nil).
//
// TODO: use provider/constraints.ParseTags when it lands.
func parseConstraints(expr string) (func([]string) bool, error) {
	if expr == "" {
		return nil, nil
	}
	return nil, errors.New("constraints are not supported yet")
}
