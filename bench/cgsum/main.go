// Command cgsum reads the output of valgrind's callgrind tool, written
// with --dump-instr=yes --dump-line=no --compress-pos=no, and prints the
// instructions executed per request by function: each instruction's count
// goes to the symbol of the binary whose code holds its address. (The
// function contexts callgrind keeps itself are not used: it tracks calls
// by a shadow stack, which goroutine switches leave wrong.) bench/instr.sh
// runs it; by hand:
//
//	cgsum -bin ./ringlb -n 6250 callgrind.out.1 > ringlb.sum
//	cgsum -diff ringlb.sum floor.sum | head -40
//
// The first line is TOTAL: every instruction of the window over n. With
// -diff it prints, for every function in either file, a's count minus
// b's, a's, b's and the name, the largest difference first.
package main

import (
	"bufio"
	"cmp"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("cgsum: ")
	bin := flag.String("bin", "", "the binary callgrind ran (with its symbol table: not built with -s)")
	n := flag.Float64("n", 1, "what to divide by: the requests of the window")
	diff := flag.Bool("diff", false, "compare two summaries: cgsum -diff A.sum B.sum")
	flag.Parse()
	if *diff {
		if flag.NArg() != 2 {
			log.Fatal("-diff takes two summaries")
		}
		if err := diffSums(os.Stdout, flag.Arg(0), flag.Arg(1)); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *bin == "" || flag.NArg() != 1 || *n <= 0 {
		log.Fatal("usage: cgsum -bin BINARY -n REQUESTS CALLGRIND_OUT, or cgsum -diff A.sum B.sum")
	}
	syms, err := symbols(*bin)
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	costs, err := attribute(f, syms)
	if err != nil {
		log.Fatalf("%s: %v", flag.Arg(0), err)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	writeSum(w, costs, *n)
}

type symbol struct {
	addr, size uint64
	name       string
}

// symbols returns the binary's function symbols sorted by address.
func symbols(path string) ([]symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	all, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w (built with -ldflags=-s?)", path, err)
	}
	var syms []symbol
	for _, s := range all {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC || (elf.ST_TYPE(s.Info) == elf.STT_NOTYPE && s.Section != elf.SHN_UNDEF && s.Value != 0) {
			syms = append(syms, symbol{s.Value, s.Size, s.Name})
		}
	}
	slices.SortFunc(syms, func(a, b symbol) int { return cmp.Compare(a.addr, b.addr) })
	return syms, nil
}

// attribute sums the self cost of every instruction line of a callgrind
// file by the symbol holding the address. A cost line after "calls=" is
// the inclusive cost of a call, not an instruction's own, and is skipped;
// an address no symbol holds (the vDSO, valgrind's own) goes to "?".
func attribute(r io.Reader, syms []symbol) (map[string]uint64, error) {
	costs := map[string]uint64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	afterCall := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "calls=") {
			afterCall = true
			continue
		}
		if !strings.HasPrefix(line, "0x") {
			afterCall = false
			continue
		}
		if afterCall {
			afterCall = false
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		addr, err := strconv.ParseUint(fields[0][2:], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("address %q: %v", fields[0], err)
		}
		c, err := strconv.ParseUint(fields[len(fields)-1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cost %q: %v (written with --dump-line=no?)", fields[len(fields)-1], err)
		}
		name := "?"
		if i, _ := slices.BinarySearchFunc(syms, addr, func(s symbol, a uint64) int { return cmp.Compare(s.addr, a+1) }); i > 0 {
			if s := syms[i-1]; s.size == 0 || addr < s.addr+s.size {
				name = s.name
			}
		}
		costs[name] += c
	}
	return costs, sc.Err()
}

func writeSum(w io.Writer, costs map[string]uint64, n float64) {
	var total uint64
	names := make([]string, 0, len(costs))
	for name, c := range costs {
		total += c
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(costs[b], costs[a]), cmp.Compare(a, b)) })
	fmt.Fprintf(w, "%.0f\tTOTAL\n", float64(total)/n)
	for _, name := range names {
		if v := float64(costs[name]) / n; v >= 0.5 {
			fmt.Fprintf(w, "%.0f\t%s\n", v, name)
		}
	}
}

func readSum(path string) (map[string]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		v, name, ok := strings.Cut(line, "\t")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s:%d: not a summary line: %q", path, i+1, line)
		}
		m[name] += f
	}
	return m, nil
}

func diffSums(w io.Writer, pa, pb string) error {
	a, err := readSum(pa)
	if err != nil {
		return err
	}
	b, err := readSum(pb)
	if err != nil {
		return err
	}
	names := []string{}
	for name := range a {
		names = append(names, name)
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			names = append(names, name)
		}
	}
	d := func(n string) float64 { return a[n] - b[n] }
	slices.SortFunc(names, func(x, y string) int { return cmp.Or(cmp.Compare(d(y), d(x)), cmp.Compare(x, y)) })
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	fmt.Fprintf(bw, "%8s %8s %8s  %s\n", "a-b", "a", "b", "function")
	for _, name := range names {
		fmt.Fprintf(bw, "%8.0f %8.0f %8.0f  %s\n", d(name), a[name], b[name], name)
	}
	return nil
}
