package state

import "testing"

func TestParse(t *testing.T) {
	for i, n := range Names() {
		if st, err := Parse(n); err != nil || st != Admin(i) || st.String() != n {
			t.Errorf("Parse(%q) = %v, %v", n, st, err)
		}
	}
	for _, bad := range []string{"", "Ready", "draining", "disabled"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
