// Package e2e holds tollgate's process-level tests: each starts the
// tollgate binary (internal/itest.Binary builds it once for the package's
// test binary) with real flags, files and variables, and asserts what a
// user sees of the process: its listeners and what they forward, its log,
// its exit status, its admin API and metrics, its answers to signals, its
// upgrades in place. Beside TestScale, BenchmarkApplyFile and
// BenchmarkCheckFile measure the same large files in process. Tests of
// one package's code live with that package.
package e2e
