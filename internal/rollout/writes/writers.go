package writes

import "sync"

// Writers runs Application writes a bounded number at a time.
type Writers struct {
	sem chan struct{}
	wg  sync.WaitGroup
}

// NewWriters returns a pool of n writers (at least one).
func NewWriters(n int) *Writers { return &Writers{sem: make(chan struct{}, max(n, 1))} }

// Run starts write once a writer is free.
func (p *Writers) Run(write func()) {
	p.sem <- struct{}{}
	p.wg.Go(func() {
		defer func() { <-p.sem }()
		write()
	})
}

// Wait waits for every write started.
func (p *Writers) Wait() { p.wg.Wait() }
