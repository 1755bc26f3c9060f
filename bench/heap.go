package bench

import (
	"runtime"
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

// HeapSampler records the peaks of the Go heap, read from runtime/metrics
// every Every while it runs: the object bytes (live objects and dead ones
// the garbage collector has not freed yet) and the bytes the last
// collection marked live. On the pure-Go backend every tensor buffer is a
// Go slice, so these are the backend's device memory; with a low GC
// percentage (debug.SetGCPercent) collections are frequent and the live
// peak close to the true one. Unlike the process's RSS, neither counts
// memory the runtime keeps after a collection.
type HeapSampler struct {
	Every time.Duration // sampling period (0 = 2 ms)

	mu       sync.Mutex
	peak     uint64
	peakLive uint64
	stop     chan struct{}
	done     chan struct{}
}

// HeapBytes returns the Go heap's object bytes now.
func HeapBytes() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// LiveHeapBytes runs two garbage collections and returns the heap's object
// bytes after them: what is reachable now.
func LiveHeapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	return HeapBytes()
}

// Start begins sampling in a goroutine; Stop ends it and returns the peak.
func (h *HeapSampler) Start() {
	every := h.Every
	if every <= 0 {
		every = 2 * time.Millisecond
	}
	h.peak = HeapBytes()
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
func (h *HeapSampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(h.peak, HeapBytes())
}

// LivePeak returns the peak of the live bytes seen between Start and Stop.
func (h *HeapSampler) LivePeak() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peakLive
}
