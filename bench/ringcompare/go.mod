module github.com/ringlb/ringlb/bench/ringcompare

go 1.26.8

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/golang/groupcache v0.0.0-20241129210726-2c02b8208cf8
	github.com/ringlb/ringlb v0.0.0
)

require github.com/buraksezer/consistent v0.10.0

replace github.com/ringlb/ringlb => ../..
