package modelsim

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// cronTemplate is "{{cron +20m}}" in a call's arguments: the 5-field UTC cron for that many
// minutes from now, so a scripted create_job can schedule a one-time follow-up.
var cronTemplate = regexp.MustCompile(`\{\{cron \+(\d+)m\}\}`)

// expandTemplates fills the templates in the reply's tool-call arguments.
func expandTemplates(rep reply, now time.Time) reply {
	for i := range rep.calls {
		args := rep.calls[i].Function.Arguments
		rep.calls[i].Function.Arguments = cronTemplate.ReplaceAllStringFunc(args, func(m string) string {
			minutes, _ := strconv.Atoi(cronTemplate.FindStringSubmatch(m)[1])
			at := now.UTC().Add(time.Duration(minutes) * time.Minute)
			return fmt.Sprintf("%d %d %d %d *", at.Minute(), at.Hour(), at.Day(), int(at.Month()))
		})
	}
	return rep
}
