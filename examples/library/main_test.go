package main

// The program's output is its test: it reaches both limits, and the queue
// paces and then refuses jobs.
func Example() {
	main()
	// Output:
	// 0s: 7 requests at once; the burst of 5 passes, 5 per second stops the rest
	//   203.0.113.7   200 OK (limit 5, remaining 4)
	//   203.0.113.7   200 OK (limit 5, remaining 3)
	//   203.0.113.7   200 OK (limit 5, remaining 2)
	//   203.0.113.7   200 OK (limit 5, remaining 1)
	//   203.0.113.7   200 OK (limit 5, remaining 0)
	//   203.0.113.7   429 Too Many Requests, Retry-After 200ms (limit 5, remaining 0)
	//   203.0.113.7   429 Too Many Requests, Retry-After 200ms (limit 5, remaining 0)
	// 1s: 5 more; 3 pass, and 8 per minute stops the rest for over a minute
	//   203.0.113.7   200 OK (limit 8, remaining 2)
	//   203.0.113.7   200 OK (limit 8, remaining 1)
	//   203.0.113.7   200 OK (limit 8, remaining 0)
	//   203.0.113.7   429 Too Many Requests, Retry-After 1m6.5s (limit 8, remaining 0)
	//   203.0.113.7   429 Too Many Requests, Retry-After 1m6.5s (limit 8, remaining 0)
	// 1s: another client has a quota of its own
	//   198.51.100.23 200 OK (limit 5, remaining 4)
	//   198.51.100.23 200 OK (limit 5, remaining 3)
	// 1s: 7 jobs queued at once, 5 per second, waiting at most 1s
	//   job 1: runs in 0s
	//   job 2: runs in 200ms
	//   job 3: runs in 400ms
	//   job 4: runs in 600ms
	//   job 5: runs in 800ms
	//   job 6: runs in 1s
	//   job 7: refused, its turn is 1.2s away
}
