package ring

import (
	"math"
	"testing"
)

func TestLimitFloor(t *testing.T) {
	for _, tc := range []struct {
		c        float64
		floor    int64
		inflight int64
		w, W     float64
		want     int64
	}{
		{1.25, 1, 0, 1, 4, 1},    // ceil(1.25 × 1 / 4): a quiet fleet's cap without a floor
		{1.25, 1, 1, 1, 4, 1},    // the second parallel request already overflows
		{1.25, 8, 1, 1, 4, 8},    // the floor keeps it home
		{1.25, 8, 24, 1, 4, 8},   // ceil(7.8125) = 8
		{1.25, 8, 25, 1, 4, 9},   // ceil(8.125): the proportional cap takes over
		{1.25, 8, 99, 4, 10, 50}, // weight 4 of 10
		{0, 8, 1000, 1, 4, math.MaxInt64},
		{1.25, 8, 5, 1, 0, math.MaxInt64},
	} {
		if got := Limit(tc.c, tc.floor, tc.inflight, tc.w, tc.W); got != tc.want {
			t.Errorf("Limit(%v, %d, %d, %v, %v) = %d, want %d", tc.c, tc.floor, tc.inflight, tc.w, tc.W, got, tc.want)
		}
	}
}
