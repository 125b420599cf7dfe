package verdict

import (
	"fmt"

	"github.com/goneli/goneli/internal/member"
)

// Interleaving is a committed record that follows, in its partition, a record of a later tenure
// of its role: fenced writes promise that none does.
type Interleaving struct {
	Offset int64              // the record's offset
	Record member.WriteRecord // the record
	After  member.WriteRecord // the record of the later tenure that it follows
}

func (i Interleaving) String() string {
	return fmt.Sprintf("at offset %d, %s's record %d of role %q, token %d, follows %s's record %d of token %d",
		i.Offset, i.Record.Member, i.Record.Seq, i.Record.Role, i.Record.Token, i.After.Member, i.After.Seq, i.After.Token)
}

// WriteOrder checks the records of member writes (member.Options.Writes) that a read_committed
// consumer reads from one partition, in offset order. Tokens strictly increase from tenure to
// tenure of a role, so each role's tokens must never go down. The zero value is ready to use.
type WriteOrder struct {
	Records     int // records added
	Interleaved []Interleaving
	high        map[string]member.WriteRecord // by role: the record of the highest token so far
}

// Add checks the record read at offset and reports whether it is in order.
func (o *WriteOrder) Add(offset int64, w member.WriteRecord) bool {
	o.Records++
	if o.high == nil {
		o.high = map[string]member.WriteRecord{}
	}
	if last, ok := o.high[w.Role]; ok && w.Token < last.Token {
		o.Interleaved = append(o.Interleaved, Interleaving{Offset: offset, Record: w, After: last})
		return false
	}
	o.high[w.Role] = w
	return true
}
