// Package ringcompare benchmarks ringlb's ring against other Go
// consistent-hash libraries. It is a separate module so that those
// libraries never become dependencies of ringlb itself.
package ringcompare
