// Package fleet holds the end-to-end tests of a camproxy fleet: several camproxy
// processes sharing a real Redis Cluster or Sentinel setup, with a master killed
// mid-run. It has no code of its own; the processes are this package's test binary
// run again as camproxy (see TestMain).
package fleet
