// Package docs holds the documentation tree (docs/, README.md, bench/README.md,
// ARCHITECTURE.md) to the code:
//
//   - StaticOptions generates docs/reference/static-options.md from
//     config.Command's types, the names and descriptions `tollgate --help`
//     prints; TestStaticReference fails when the committed page differs
//     (`go generate ./internal/docs/` rewrites it);
//   - TestExamples runs every configuration snippet of the docs through
//     tollgate check's code (the markers are described in
//     docs/development.md, "Examples in the docs");
//   - TestReferences resolves every citation of a doc section or file, from
//     the docs and from code comments, every markdown link between them, and
//     every Go symbol the docs name in backquotes;
//   - TestOldReadmeFacts keeps the facts the README used to hold findable in
//     docs/.
//
// Nothing here runs in tollgate: only its tests and go generate use it.
package docs

//go:generate go test -run TestStaticReference -update .
