// Package lint pins the linters `make test` runs that are Go programs, as tools of this
// module (go.mod's tool directives), so every machine runs the same versions:
//
//	go tool actionlint    .github/workflows/*.yml (github.com/rhysd/actionlint)
package lint
