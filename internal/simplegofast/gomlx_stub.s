//go:build !nofastkernels

// gomlx.go declares simplego's functions it reaches with go:linkname
// without a body; a package with an assembly file may do so on every
// architecture. This file holds no code.
