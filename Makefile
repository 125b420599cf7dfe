.PHONY: test demo vet

# Every package, race detector on. Tests that need Docker skip themselves where there is none.
test:
	go test -race -count=1 ./...

demo:
	go run ./cmd/neli demo

vet:
	go vet ./...
