package redlimit_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
)

// TestConfigEqual: Equal is the struct's ==, whichever field differs (a
// field added to Config and not to Equal fails here).
func TestConfigEqual(t *testing.T) {
	base := redlimit.Config{Algorithm: redlimit.TokenBucket, Mode: redlimit.Overall, Rate: 10, Interval: time.Second, Burst: 20, Capacity: 5, Epoch: 7}
	same := base
	if !base.Equal(&same) {
		t.Fatal("equal configs reported different")
	}
	v := reflect.ValueOf(&same).Elem()
	for i := range v.NumField() {
		same = base
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		default:
			t.Fatalf("field %s: kind %s not covered by this test", v.Type().Field(i).Name, f.Kind())
		}
		if base.Equal(&same) || base == same {
			t.Errorf("field %s differs: Equal %v, == %v; want false", v.Type().Field(i).Name, base.Equal(&same), base == same)
		}
	}
}
