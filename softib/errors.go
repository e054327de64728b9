package softib

import "fmt"

func errorf(format string, args ...any) error {
	return fmt.Errorf("softib: "+format, args...)
}
