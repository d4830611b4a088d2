package pipeline

import (
	"bufio"
	"io"
)

func newReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }
