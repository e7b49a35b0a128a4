# dbinformer — see README.md.
GO ?= go
TEST_TIMEOUT ?= 45m

.PHONY: test deps postgres vet
test: deps vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

deps: postgres

postgres:
	bash scripts/ensure-postgres.sh

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
