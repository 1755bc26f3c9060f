// Package heapstat measures the Go heap: its size now and its peaks while
// something runs. On GoMLX's pure-Go backend every tensor buffer is a Go
// slice, so the heap is the backend's device memory; the benchmarks of
// bench/ and model/ report their peaks with it.
package heapstat

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// heapObjects is the runtime/metrics sample of the bytes of heap objects:
// live ones, and dead ones the garbage collector has not yet freed.
const heapObjects = "/memory/classes/heap/objects:bytes"

// heapLive is the runtime/metrics sample of the heap bytes the last
// garbage collection marked live.
const heapLive = "/gc/heap/live:bytes"

// Sampler records the peaks of the Go heap every Every while it runs: the
// object bytes (dead objects not yet freed included) and the bytes the
// last collection marked live. On the pure-Go backend tensors are Go
// slices, so these are its device memory; a low GC percentage brings the
// live peak close to the true one. Neither counts what RSS would.
type Sampler struct {
	Every time.Duration // sampling period (0 = 2 ms)

	mu       sync.Mutex
	peak     uint64
	peakLive uint64
	stop     chan struct{}
	done     chan struct{}
}

// Bytes returns the Go heap's object bytes now.
func Bytes() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// LiveBytes runs two garbage collections and returns the heap's object
// bytes after them: what is reachable now.
func LiveBytes() uint64 {
	runtime.GC()
	runtime.GC()
	return Bytes()
}

// Start begins sampling in a goroutine; Stop ends it and returns the peak.
func (h *Sampler) Start() {
	every := h.Every
	if every <= 0 {
		every = 2 * time.Millisecond
	}
	h.peak = Bytes()
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(h.done)
		t := time.NewTicker(every)
		defer t.Stop()
		s := []metrics.Sample{{Name: heapObjects}, {Name: heapLive}}
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				metrics.Read(s)
				h.mu.Lock()
				h.peak = max(h.peak, s[0].Value.Uint64())
				h.peakLive = max(h.peakLive, s[1].Value.Uint64())
				h.mu.Unlock()
			}
		}
	}()
}

// Stop ends the sampling and returns the peak object bytes seen since Start.
func (h *Sampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(h.peak, Bytes())
}

// LivePeak returns the peak of the live bytes seen between Start and Stop.
func (h *Sampler) LivePeak() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peakLive
}

// Peak runs fn with the garbage collector made eager (GC percent 5, after a
// collection), so that the heap holds what fn keeps rather than garbage, and
// returns the peak of the heap's object bytes while it ran, sampled every
// millisecond. The GC percent is restored afterwards.
func Peak(fn func()) uint64 {
	old := debug.SetGCPercent(5)
	defer debug.SetGCPercent(old)
	runtime.GC()
	h := Sampler{Every: time.Millisecond}
	h.Start()
	fn()
	return h.Stop()
}
